"""RMSNorm and fused residual-add RMSNorm: one vector kernel, persistent over rows.

A row of up to MAX_SINGLE_PASS elements (fewer with a residual) stays on chip (one read, one
write). Wider rows are processed in CHUNK-wide pieces in two passes (sum of squares, then
scale), so the tile never exceeds the unified-buffer budget whatever the hidden size.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ascendkit.platform import grid_size

# bishengir-compile's plan for a 4096-wide row (16-bit, double-buffered): 120 KB of UB without a
# residual, 184 KB with one (over the gate's 160 KB); a 2048-wide row with a residual: 92 KB.
MAX_SINGLE_PASS = 4096
MAX_SINGLE_PASS_RESIDUAL = 2048
CHUNK = 2048


@triton.jit
def _load_row_chunk(x_row, res_row, cols, n: tl.constexpr, HAS_RESIDUAL: tl.constexpr):
    """Load x[cols] (and add residual[cols], writing the sum back to residual) in fp32."""
    mask = cols < n
    x = tl.load(x_row + cols, mask=mask, other=0.0)
    if HAS_RESIDUAL:
        r = tl.load(res_row + cols, mask=mask, other=0.0)
        # The stored residual is rounded to the tensor dtype, and the norm sees that rounded value
        # (HF semantics: residual add happens in the model dtype).
        x = (x.to(tl.float32) + r.to(tl.float32)).to(x.dtype)
        tl.store(res_row + cols, x, mask=mask)
    return x.to(tl.float32)


@triton.jit
def _scale_store(out_row, w, x, rstd, cols, n: tl.constexpr):
    # Normalise in fp32, round to the model dtype, then apply the weight (as HF's RMSNorm does).
    y = (x * rstd).to(w.dtype).to(tl.float32) * w.to(tl.float32)
    tl.store(out_row + cols, y.to(out_row.dtype.element_ty), mask=cols < n)


@triton.jit(do_not_specialize=["n_rows", "x_stride", "res_stride", "out_stride"])
def rms_norm_kernel(
    x_ptr, res_ptr, out_ptr, w_ptr,
    n_rows, x_stride, res_stride, out_stride, eps,
    N: tl.constexpr, BLOCK: tl.constexpr, HAS_RESIDUAL: tl.constexpr,
):
    cols = tl.arange(0, BLOCK)
    if N <= BLOCK:  # every row of this program shares the weight: read it once
        w_row = tl.load(w_ptr + cols, mask=cols < N, other=0.0)
    for row in range(tl.program_id(0), n_rows, tl.num_programs(0)):
        row64 = tl.cast(row, tl.int64)
        x_row = x_ptr + row64 * x_stride
        res_row = res_ptr + row64 * res_stride
        out_row = out_ptr + row64 * out_stride
        if N <= BLOCK:
            x = _load_row_chunk(x_row, res_row, cols, N, HAS_RESIDUAL)
            rstd = tl.rsqrt(tl.sum(x * x, 0) / N + eps)
            _scale_store(out_row, w_row, x, rstd, cols, N)
        else:
            sq = tl.zeros([BLOCK], dtype=tl.float32)
            for start in range(0, N, BLOCK):
                x = _load_row_chunk(x_row + start, res_row + start, cols, N - start, HAS_RESIDUAL)
                sq += x * x
            rstd = tl.rsqrt(tl.sum(sq, 0) / N + eps)
            # Second pass re-reads the (updated) residual when there is one: it holds the sum.
            src_row = res_row if HAS_RESIDUAL else x_row
            for start in range(0, N, BLOCK):
                x = tl.load(src_row + start + cols, mask=cols < N - start, other=0.0).to(tl.float32)
                w = tl.load(w_ptr + start + cols, mask=cols < N - start, other=0.0)
                _scale_store(out_row + start, w, x, rstd, cols, N - start)


def block_for(hidden: int, has_residual: bool) -> int:
    single_pass = MAX_SINGLE_PASS_RESIDUAL if has_residual else MAX_SINGLE_PASS
    return triton.next_power_of_2(hidden) if hidden <= single_pass else CHUNK


def _launch(x: torch.Tensor, residual: torch.Tensor | None, out: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    hidden = x.shape[-1]
    x2, out2 = x.view(-1, hidden), out.view(-1, hidden)
    res2 = residual.view(-1, hidden) if residual is not None else x2
    rows = x2.shape[0]
    if rows == 0:
        return
    rms_norm_kernel[(grid_size(x.device, rows),)](
        x2, res2, out2, weight,
        rows, x2.stride(0), res2.stride(0), out2.stride(0), eps,
        N=hidden, BLOCK=block_for(hidden, residual is not None), HAS_RESIDUAL=residual is not None,
    )


def rms_norm(out: torch.Tensor, input: torch.Tensor, weight: torch.Tensor, epsilon: float) -> None:
    _launch(input, None, out, weight, epsilon)


def fused_add_rms_norm(input: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, epsilon: float) -> None:
    _launch(input, residual, input, weight, epsilon)
