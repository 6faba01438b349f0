"""max/min reductions that stay fast under the Triton interpreter.

triton-ascend replaces tl.max/tl.min with versions whose combine functions the 3.2 interpreter
does not recognise, so it reduces them one element at a time in Python (~100x slower; measured:
5.7 s for a 7x9000 quantization). Reducing with upstream's own combine functions takes the
interpreter's numpy path and compiles to the same max/min reduction on Ascend and CUDA.
Inputs must be fp32 (or int32): triton-ascend's tl.max would upcast 16-bit floats itself.
"""
import triton
import triton.language as tl


@triton.jit
def fast_max(x, axis):
    return tl.reduce(x, axis, tl.standard._elementwise_max)


@triton.jit
def fast_min(x, axis):
    return tl.reduce(x, axis, tl.standard._elementwise_min)
