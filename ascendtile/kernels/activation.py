"""Gated activations (the MLP's act(gate) * up): one vector kernel, persistent over (row, chunk
of the output width) work items, with the activation chosen by a constexpr: SiLU (SwiGLU, Llama
family), tanh-approximated GELU (GeGLU, Gemma) or exact (erf) GELU. With QUANT the product is
rounded to the input dtype and quantized to int8 with one static scale
(fused_quant.silu_and_mul_quant)."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ascendtile.kernels._int8 import quantize_int8
from ascendtile.platform import grid_size

# Gate + up inputs, their fp32 copies and the product: ~20 bytes per element -> 2048 is ~40 KB
# (planned: 48 KB; the erf GELU's rational approximation has more temporaries, 72 KB).
MAX_BLOCK = 2048
# With the int8 output the round-half-even temporaries dominate, as in quant.py: 1024-wide
# chunks plan 91 KB of UB (fused_quant's lowering cases).
MAX_BLOCK_QUANT = 1024
ACTIVATIONS = ("silu", "gelu_tanh", "gelu")


@triton.jit
def apply_activation(x, ACTIVATION: tl.constexpr):
    """x fp32. gelu_tanh: 0.5·x·(1 + tanh(z)) = x·sigmoid(2z), z = sqrt(2/pi)·(x + 0.044715·x³)
    (2·sqrt(2/pi) = 1.5957691216057308): tl has no tanh that lowers for Ascend, sigmoid does, and
    it saturates to exactly 0 / 1 for large |x|.
    gelu: 0.5·x·(1 + erf(x/√2)) with tl.math.erf, which lowers for Ascend: BiShengIR's HFusion
    expands it into vector ops, x clamped to ±3.92 then x·P(x²)/Q(x²) (degree 5 / 5). Emulated in
    fp32 over a dense grid on [-8, 8] that erf is within 4.3e-7 of fp64 erf (<= 8 ulp of torch's
    fp32 erf) and the GELU within 2.3 eps·|x| of fp64 (torch's fp32 F.gelu: 3.2). The interpreter
    rounds fp64 math.erf."""
    if ACTIVATION == "silu":
        return x * tl.sigmoid(x)
    elif ACTIVATION == "gelu":
        return 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476))
    else:
        return x * tl.sigmoid(1.5957691216057308 * (x + 0.044715 * x * x * x))


@triton.jit
def _output(y, x_ptr, out_ptr, divisor, QUANT: tl.constexpr):
    """act(gate) * up (fp32) as the output dtype, or rounded to the input dtype (what the unfused
    silu_and_mul writes) and quantized to int8 with the static scale."""
    if QUANT:
        return quantize_int8(y.to(x_ptr.dtype.element_ty).to(tl.float32), divisor, 0.0)
    return y.to(out_ptr.dtype.element_ty)


@triton.jit(do_not_specialize=["n_rows", "x_stride", "out_stride"])
def gated_activation_kernel(x_ptr, out_ptr, scale_ptr, n_rows, x_stride, out_stride, D: tl.constexpr,
                            BLOCK: tl.constexpr, ACTIVATION: tl.constexpr, QUANT: tl.constexpr):
    """Work item = (row, BLOCK-wide chunk of the output width), so a small decode batch still
    spreads over the vector cores; chunks are masked only when BLOCK does not divide D. scale_ptr
    (one fp32) is read only with QUANT."""
    cols = tl.arange(0, BLOCK)
    n_chunks = (D + BLOCK - 1) // BLOCK
    divisor = 1.0
    if QUANT:
        divisor = tl.load(scale_ptr).to(tl.float32)
    for work in range(tl.program_id(0), n_rows * n_chunks, tl.num_programs(0)):
        row = work // n_chunks
        start = (work % n_chunks) * BLOCK
        x_row = x_ptr + tl.cast(row, tl.int64) * x_stride + start
        out_row = out_ptr + tl.cast(row, tl.int64) * out_stride + start
        if D % BLOCK == 0:
            gate = tl.load(x_row + cols).to(tl.float32)
            up = tl.load(x_row + D + cols).to(tl.float32)
            tl.store(out_row + cols, _output(apply_activation(gate, ACTIVATION) * up, x_ptr, out_ptr, divisor, QUANT))
        else:
            mask = cols < D - start
            gate = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
            up = tl.load(x_row + D + cols, mask=mask, other=0.0).to(tl.float32)
            y = apply_activation(gate, ACTIVATION) * up
            tl.store(out_row + cols, _output(y, x_ptr, out_ptr, divisor, QUANT), mask=mask)


def block_for(width: int, quant: bool = False) -> int:
    return min(triton.next_power_of_2(width), MAX_BLOCK_QUANT if quant else MAX_BLOCK)


def launch(out: torch.Tensor, input: torch.Tensor, activation: str, scale: torch.Tensor | None = None) -> None:
    """out [..., d] = act(input[..., :d]) * input[..., d:]; int8 out quantized with `scale` when given."""
    d = out.shape[-1]
    x2, out2 = input.view(-1, 2 * d), out.view(-1, d)
    rows = x2.shape[0]
    if rows == 0:
        return
    quant = scale is not None
    block = block_for(d, quant)
    gated_activation_kernel[(grid_size(input.device, rows * triton.cdiv(d, block)),)](
        x2, out2, scale if quant else out2, rows, x2.stride(0), out2.stride(0),
        D=d, BLOCK=block, ACTIVATION=activation, QUANT=quant,
    )


def silu_and_mul(out: torch.Tensor, input: torch.Tensor) -> None:
    launch(out, input, "silu")


def gelu_tanh_and_mul(out: torch.Tensor, input: torch.Tensor) -> None:
    launch(out, input, "gelu_tanh")


def gelu_and_mul(out: torch.Tensor, input: torch.Tensor) -> None:
    launch(out, input, "gelu")
