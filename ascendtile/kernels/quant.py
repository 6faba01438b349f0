"""int8 quantization of activations: one vector kernel, persistent over rows.

STATIC: one given scale (and optional zero point). DYNAMIC: per-row scale from the row's range
(symmetric max|x|/127, or vLLM's asymmetric (max-min)/255 with a zero point), written out.
A row of up to MAX_SINGLE_PASS elements stays on chip between the range pass and the quantize
pass; wider rows are read twice in chunks of the widest power of two up to CHUNK that divides
the width, unmasked (masked only for widths no such chunk divides).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ascendtile.kernels._int8 import quantize_int8, round_half_even
from ascendtile.kernels._reduce import fast_max, fast_min
from ascendtile.kernels._tile_io import chunk_for, load_tile, store_tile
from ascendtile.platform import grid_size

# bishengir-compile plans ~75-90 bytes of UB per element (fp32 temporaries of the round-half-even
# quantization, double-buffered): a 2048-wide tile came to 149-182 KB, 8192 overflowed the 192 KB;
# 1024-wide tiles stay at 74-91 KB.
MAX_SINGLE_PASS = 1024
CHUNK = 1024


@triton.jit
def value_range(x, mask, ASYM: tl.constexpr, MASKED: tl.constexpr):
    """(max, min) of the valid x for ASYM, else (max|x|, 0) (masked-off x are 0)."""
    if ASYM and MASKED:
        return fast_max(tl.where(mask, x, float("-inf")), 0), fast_min(tl.where(mask, x, float("inf")), 0)
    if ASYM:
        return fast_max(x, 0), fast_min(x, 0)
    return fast_max(tl.abs(x), 0), 0.0


@triton.jit
def _load(x_row, cols, n, MASKED: tl.constexpr):
    mask = cols < n
    return load_tile(x_row + cols, mask, MASKED).to(tl.float32), mask


@triton.jit
def dynamic_params(hi, lo, scale_out, azp_out, ASYM: tl.constexpr):
    """Store this row's scale (and zero point); return (divisor, zero point) for quantize_int8."""
    scale = (hi - lo) / 255.0 if ASYM else hi / 127.0
    # A zero (or constant) row has scale 0: divide by 1 so it quantizes to the zero point.
    divisor = tl.where(scale == 0.0, 1.0, scale)
    tl.store(scale_out, scale)
    zero_point = 0.0
    if ASYM:
        zero_point = round_half_even(-128.0 - lo / divisor)
        tl.store(azp_out, zero_point.to(tl.int32))
    return divisor, zero_point


@triton.jit(do_not_specialize=["n_rows", "x_stride", "out_stride"])
def int8_quant_kernel(
    x_ptr, out_ptr, scale_ptr, azp_ptr,
    n_rows, x_stride, out_stride,
    N: tl.constexpr, BLOCK: tl.constexpr, DYNAMIC: tl.constexpr, HAS_AZP: tl.constexpr,
):
    cols = tl.arange(0, BLOCK)
    divisor = 1.0
    zero_point = 0.0
    if not DYNAMIC:
        divisor = tl.load(scale_ptr).to(tl.float32)
        if HAS_AZP:
            zero_point = tl.load(azp_ptr).to(tl.float32)
    for row in range(tl.program_id(0), n_rows, tl.num_programs(0)):
        row64 = tl.cast(row, tl.int64)
        x_row = x_ptr + row64 * x_stride
        out_row = out_ptr + row64 * out_stride
        if N <= BLOCK:  # the row stays on chip: one read
            x, mask = _load(x_row, cols, N, N < BLOCK)
            if DYNAMIC:
                hi, lo = value_range(x, mask, HAS_AZP, N < BLOCK)
                divisor, zero_point = dynamic_params(hi, lo, scale_ptr + row, azp_ptr + row, HAS_AZP)
            store_tile(out_row + cols, quantize_int8(x, divisor, zero_point), mask, N < BLOCK)
        else:
            if DYNAMIC:
                x, mask = _load(x_row, cols, N, False)  # the first chunk is always full
                hi, lo = value_range(x, mask, HAS_AZP, False)
                for start in range(BLOCK, N, BLOCK):
                    x, mask = _load(x_row + start, cols, N - start, N % BLOCK != 0)
                    chunk_hi, chunk_lo = value_range(x, mask, HAS_AZP, N % BLOCK != 0)
                    hi = tl.maximum(hi, chunk_hi)
                    lo = tl.minimum(lo, chunk_lo)
                divisor, zero_point = dynamic_params(hi, lo, scale_ptr + row, azp_ptr + row, HAS_AZP)
            for start in range(0, N, BLOCK):
                x, mask = _load(x_row + start, cols, N - start, N % BLOCK != 0)
                store_tile(out_row + start + cols, quantize_int8(x, divisor, zero_point), mask, N % BLOCK != 0)


def block_for(hidden: int) -> int:
    return triton.next_power_of_2(hidden) if hidden <= MAX_SINGLE_PASS else chunk_for(hidden, CHUNK)
def _launch(out: torch.Tensor, input: torch.Tensor, scale: torch.Tensor, azp: torch.Tensor | None, dynamic: bool) -> None:
    hidden = input.shape[-1]
    x2, out2 = input.view(-1, hidden), out.view(-1, hidden)
    rows = x2.shape[0]
    if rows == 0:
        return
    int8_quant_kernel[(grid_size(input.device, rows),)](
        x2, out2, scale, azp if azp is not None else scale,
        rows, x2.stride(0), out2.stride(0),
        N=hidden, BLOCK=block_for(hidden), DYNAMIC=dynamic, HAS_AZP=azp is not None,
    )


def static_scaled_int8_quant(out: torch.Tensor, input: torch.Tensor, scale: torch.Tensor, azp: torch.Tensor | None) -> None:
    _launch(out, input, scale, azp, dynamic=False)


def dynamic_scaled_int8_quant(out: torch.Tensor, input: torch.Tensor, scales: torch.Tensor, azp: torch.Tensor | None) -> None:
    _launch(out, input, scales, azp, dynamic=True)
