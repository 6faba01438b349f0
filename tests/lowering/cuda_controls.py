"""The positive control of the CUDA compile check (test_cuda_target.py): a kernel that reads a
plain module global, as the attention and KV-cache kernels did before 2026-11-26."""
import triton
import triton.language as tl

from ascendtile.lowering.case import LoweringCase

PLAIN_MODE = 2  # not a tl.constexpr: upstream triton refuses to read it in @jit code


@triton.jit
def reads_plain_global(x_ptr, MODE: tl.constexpr):
    if MODE == PLAIN_MODE:
        tl.store(x_ptr, 1.0)


def cases() -> list[LoweringCase]:
    return [LoweringCase("reads_plain_global", reads_plain_global, {"x_ptr": "*fp32"}, {"MODE": PLAIN_MODE})]
