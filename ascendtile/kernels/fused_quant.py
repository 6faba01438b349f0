"""RMSNorm (optionally after the residual add) and SiLU·mul with int8 outputs: the norm or gated
activation and the int8 quantization in one kernel, so the model-dtype activation never makes a
round trip through memory between the two.

Each quantized value is exactly what the unfused op writes (fp32 math rounded to the model dtype),
divided by the scale in fp32, rounded half to even and saturated (quant.py's rule), so fused and
unfused agree up to the rounding of the fp32 sum of squares (see tests/ops/test_fused_quant.py).

rms_norm + int8: one vector kernel, persistent over rows (norm.py's and quant.py's helpers). A row of
up to MAX_SINGLE_PASS elements stays on chip; wider rows go in chunks of the widest power of two up
to CHUNK that divides the width, in passes that each re-read the row: sum of squares (writing the
residual sum back), for a dynamic scale the row's max |y|, then quantize.
silu_and_mul_quant: activation.py's gated kernel with its static int8 output (QUANT).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ascendtile.kernels._int8 import quantize_int8
from ascendtile.kernels._tile_io import chunk_for, load_tile, store_tile
from ascendtile.kernels.activation import launch as gated_activation
from ascendtile.kernels.norm import load_rows, normalize, row_views
from ascendtile.kernels.quant import dynamic_params, value_range
from ascendtile.platform import grid_size

# Planned UB (bishengir-compile, 16-bit inputs, double-buffered): the quantization's fp32
# temporaries dominate as in quant.py, so tiles stay at quant.py's 1024 elements (single pass:
# 95-115 KB; static chunks: 105-121 KB). The dynamic chunked loop holds three passes' chunk
# buffers: 154 KB, 170 KB with a residual, at 1024 (over the gate's 160); 512: 87-95 KB.
MAX_SINGLE_PASS = 1024
CHUNK = 1024
CHUNK_DYNAMIC = 512


@triton.jit
def _normed(x, rstd, w):
    """The unfused rms_norm's output value (rounded to the model dtype, w's), in fp32."""
    return normalize(x, rstd, w).to(w.dtype).to(tl.float32)


@triton.jit
def _normed_chunk(src_row, w_ptr, cols, start, rstd, N: tl.constexpr, MASKED: tl.constexpr):
    mask = cols < N - start
    x = load_tile(src_row + start + cols, mask, MASKED).to(tl.float32)
    return _normed(x, rstd, load_tile(w_ptr + start + cols, mask, MASKED)), mask


@triton.jit(do_not_specialize=["n_rows", "x_stride", "res_stride", "out_stride"])
def rms_norm_quant_kernel(
    x_ptr, res_ptr, out_ptr, w_ptr, scale_ptr,
    n_rows, x_stride, res_stride, out_stride, eps,
    N: tl.constexpr, BLOCK: tl.constexpr, HAS_RESIDUAL: tl.constexpr, DYNAMIC: tl.constexpr,
):
    """out int8 = quant(rms_norm(x [+ residual]) * w); DYNAMIC writes one fp32 scale per row to
    scale_ptr (max|y| / 127), else scale_ptr holds the one static scale."""
    cols = tl.arange(0, BLOCK)
    divisor = 1.0
    if not DYNAMIC:
        divisor = tl.load(scale_ptr).to(tl.float32)
    if N <= BLOCK:  # every row shares the weight: read it once
        w = load_tile(w_ptr + cols, cols < N, N < BLOCK)
    for row in range(tl.program_id(0), n_rows, tl.num_programs(0)):
        row64 = tl.cast(row, tl.int64)
        x_row = x_ptr + row64 * x_stride
        res_row = res_ptr + row64 * res_stride
        out_row = out_ptr + row64 * out_stride
        if N <= BLOCK:  # the row stays on chip: one read
            mask = cols < N
            x = load_rows(x_row + cols, res_row + cols, mask, N < BLOCK, HAS_RESIDUAL)
            y = _normed(x, tl.rsqrt(tl.sum(x * x, 0) / N + eps), w)
            if DYNAMIC:
                hi, _ = value_range(y, mask, False, N < BLOCK)
                divisor, _ = dynamic_params(hi, 0.0, scale_ptr + row, scale_ptr + row, False)
            store_tile(out_row + cols, quantize_int8(y, divisor, 0.0), mask, N < BLOCK)
        else:  # chunks are masked only when BLOCK does not divide N; the first is always full
            sq = tl.zeros([BLOCK], dtype=tl.float32)
            for start in range(0, N, BLOCK):
                x = load_rows(x_row + start + cols, res_row + start + cols, cols < N - start,
                              N % BLOCK != 0, HAS_RESIDUAL)
                sq += x * x
            rstd = tl.rsqrt(tl.sum(sq, 0) / N + eps)
            src_row = res_row if HAS_RESIDUAL else x_row  # the residual now holds the sum
            if DYNAMIC:
                y, mask = _normed_chunk(src_row, w_ptr, cols, 0, rstd, N, False)
                hi, _ = value_range(y, mask, False, False)
                for start in range(BLOCK, N, BLOCK):
                    y, mask = _normed_chunk(src_row, w_ptr, cols, start, rstd, N, N % BLOCK != 0)
                    chunk_hi, _ = value_range(y, mask, False, N % BLOCK != 0)
                    hi = tl.maximum(hi, chunk_hi)
                divisor, _ = dynamic_params(hi, 0.0, scale_ptr + row, scale_ptr + row, False)
            for start in range(0, N, BLOCK):
                y, mask = _normed_chunk(src_row, w_ptr, cols, start, rstd, N, N % BLOCK != 0)
                store_tile(out_row + start + cols, quantize_int8(y, divisor, 0.0), mask, N % BLOCK != 0)


def block_for(hidden: int, dynamic: bool) -> int:
    """The row padded to a power of two when it fits one pass, else the chunk width."""
    if hidden <= MAX_SINGLE_PASS:
        return triton.next_power_of_2(hidden)
    return chunk_for(hidden, CHUNK_DYNAMIC, 256) if dynamic else chunk_for(hidden, CHUNK)


def _launch(result: torch.Tensor, input: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor,
            scale: torch.Tensor, epsilon: float, dynamic: bool) -> None:
    hidden = input.shape[-1]
    x2, out2, res2 = row_views(input, result, residual)
    n_rows = x2.shape[0]
    if n_rows == 0:
        return
    rms_norm_quant_kernel[(grid_size(input.device, n_rows),)](
        x2, res2, out2, weight, scale,
        n_rows, x2.stride(0), res2.stride(0), out2.stride(0), epsilon,
        N=hidden, BLOCK=block_for(hidden, dynamic), HAS_RESIDUAL=residual is not None, DYNAMIC=dynamic,
    )


def rms_norm_dynamic_per_token_quant(result: torch.Tensor, input: torch.Tensor, weight: torch.Tensor,
                                     scale: torch.Tensor, epsilon: float, scale_ub: torch.Tensor | None,
                                     residual: torch.Tensor | None) -> None:
    _launch(result, input, residual, weight, scale, epsilon, dynamic=True)  # scale_ub: None (validated)


def rms_norm_static_int8_quant(result: torch.Tensor, input: torch.Tensor, weight: torch.Tensor,
                               scale: torch.Tensor, epsilon: float) -> None:
    _launch(result, input, None, weight, scale, epsilon, dynamic=False)


def fused_add_rms_norm_static_int8_quant(result: torch.Tensor, input: torch.Tensor, residual: torch.Tensor,
                                         weight: torch.Tensor, scale: torch.Tensor, epsilon: float) -> None:
    _launch(result, input, residual, weight, scale, epsilon, dynamic=False)


def silu_and_mul_quant(result: torch.Tensor, input: torch.Tensor, scale: torch.Tensor) -> None:
    gated_activation(result, input, "silu", scale)
