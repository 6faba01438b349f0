"""RMSNorm and fused residual-add RMSNorm: one vector kernel, persistent over groups of rows.

Rows of up to MAX_SINGLE_PASS elements (fewer with a residual) stay on chip (one read, one
write), ROWS of them per [ROWS, BLOCK] tile, the weight read once per program. Wider rows go
one at a time in CHUNK-wide pieces in two passes (sum of squares, then scale), so the tile
never exceeds the unified-buffer budget whatever the hidden size; the chunk is the widest power
of two that divides the width. Masks only where a tile can be partial: rows of the last group
(ROWS > 1), columns of a padded single-pass row, and all chunks of a width no chunk divides
(a separate unmasked loop plus a masked tail doubled the planned UB: 84 -> 148 KB at h=7168).
Without a weight (vLLM's weight=None, HAS_WEIGHT=False) no weight is read and the fp32 x·rstd is
rounded once to the output dtype.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ascendtile.kernels._tile_io import chunk_for, load_tile, store_tile
from ascendtile.platform import core_counts, grid_size

# bishengir-compile's plan for a 4096-element tile (16-bit, double-buffered): 112-120 KB of UB
# without a residual, 184 KB with one (over the gate's 160 KB); 2048 elements with a residual:
# 88-92 KB. The same element counts bound a [ROWS, BLOCK] tile of narrow rows.
MAX_SINGLE_PASS = 4096
MAX_SINGLE_PASS_RESIDUAL = 2048
CHUNK = 2048


@triton.jit
def _mask(r, cols, rows_left, n_cols, ROW_MASK: tl.constexpr, COL_MASK: tl.constexpr):
    """[ROWS, BLOCK] mask of the tile's valid rows and columns (only the parts that can be partial)."""
    if ROW_MASK and COL_MASK:
        return (r < rows_left)[:, None] & (cols < n_cols)[None, :]
    if ROW_MASK:
        return tl.broadcast_to((r < rows_left)[:, None], (r.shape[0], cols.shape[0]))
    return tl.broadcast_to((cols < n_cols)[None, :], (r.shape[0], cols.shape[0]))


@triton.jit
def load_rows(x_ptrs, res_ptrs, mask, MASKED: tl.constexpr, HAS_RESIDUAL: tl.constexpr):
    """x (plus residual, the sum written back to residual) in fp32."""
    x = load_tile(x_ptrs, mask, MASKED)
    if HAS_RESIDUAL:
        r = load_tile(res_ptrs, mask, MASKED)
        # The stored residual is rounded to the tensor dtype, and the norm sees that rounded value
        # (HF semantics: residual add happens in the model dtype).
        x = (x.to(tl.float32) + r.to(tl.float32)).to(x.dtype)
        store_tile(res_ptrs, x, mask, MASKED)
    return x.to(tl.float32)


@triton.jit
def normalize(x, rstd, w):
    """x fp32 normalised in fp32, rounded to the model dtype (w's), then times the weight (as HF's
    RMSNorm does); fp32, not yet rounded to the output dtype."""
    return (x * rstd).to(w.dtype).to(tl.float32) * w.to(tl.float32)


@triton.jit
def _scale_store(out_ptrs, w, x, rstd, mask, MASKED: tl.constexpr, HAS_WEIGHT: tl.constexpr):
    """x·rstd (times w when HAS_WEIGHT; w is None otherwise) stored in the output dtype."""
    if HAS_WEIGHT:
        y = normalize(x, rstd, w)
    else:
        y = x * rstd
    store_tile(out_ptrs, y.to(out_ptrs.dtype.element_ty), mask, MASKED)


@triton.jit
def _chunk_sq(x_row, res_row, cols, start, r, N: tl.constexpr, MASKED: tl.constexpr, HAS_RESIDUAL: tl.constexpr):
    x = load_rows(x_row + start + cols[None, :], res_row + start + cols[None, :],
                   _mask(r, cols, 1, N - start, False, True), MASKED, HAS_RESIDUAL)
    return x * x


@triton.jit
def _chunk_scale(src_row, out_row, w_ptr, cols, start, r, rstd, N: tl.constexpr, MASKED: tl.constexpr,
                 HAS_WEIGHT: tl.constexpr):
    mask = _mask(r, cols, 1, N - start, False, True)
    x = load_tile(src_row + start + cols[None, :], mask, MASKED).to(tl.float32)
    w = None
    if HAS_WEIGHT:
        w = load_tile(w_ptr + start + cols[None, :], mask, MASKED)
    _scale_store(out_row + start + cols[None, :], w, x, rstd, mask, MASKED, HAS_WEIGHT)


@triton.jit(do_not_specialize=["n_rows", "x_stride", "res_stride", "out_stride"])
def rms_norm_kernel(
    x_ptr, res_ptr, out_ptr, w_ptr,
    n_rows, x_stride, res_stride, out_stride, eps,
    N: tl.constexpr, BLOCK: tl.constexpr, ROWS: tl.constexpr, HAS_RESIDUAL: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
):
    """w_ptr is never read when not HAS_WEIGHT (the launcher passes x then)."""
    r = tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    w = None
    if N <= BLOCK and HAS_WEIGHT:  # every row of this program shares the weight: read it once
        w = load_tile(w_ptr + cols, cols < N, N < BLOCK)[None, :]
    for group in range(tl.program_id(0), tl.cdiv(n_rows, ROWS), tl.num_programs(0)):
        row0 = tl.cast(group * ROWS, tl.int64)
        x_rows = x_ptr + row0 * x_stride + r[:, None] * x_stride
        res_rows = res_ptr + row0 * res_stride + r[:, None] * res_stride
        out_rows = out_ptr + row0 * out_stride + r[:, None] * out_stride
        if N <= BLOCK:
            mask = _mask(r, cols, n_rows - group * ROWS, N, ROWS > 1, N < BLOCK)
            x = load_rows(x_rows + cols[None, :], res_rows + cols[None, :], mask, ROWS > 1 or N < BLOCK, HAS_RESIDUAL)
            rstd = tl.rsqrt(tl.sum(x * x, 1) / N + eps)[:, None]
            _scale_store(out_rows + cols[None, :], w, x, rstd, mask, ROWS > 1 or N < BLOCK, HAS_WEIGHT)
        else:  # ROWS == 1 (max_rows_for); chunks are masked only when BLOCK does not divide N
            sq = tl.zeros([ROWS, BLOCK], dtype=tl.float32)
            for start in range(0, N, BLOCK):
                sq += _chunk_sq(x_rows, res_rows, cols, start, r, N, N % BLOCK != 0, HAS_RESIDUAL)
            rstd = tl.rsqrt(tl.sum(sq, 1) / N + eps)[:, None]
            # Second pass re-reads the (updated) residual when there is one: it holds the sum.
            src_rows = res_rows if HAS_RESIDUAL else x_rows
            for start in range(0, N, BLOCK):
                _chunk_scale(src_rows, out_rows, w_ptr, cols, start, r, rstd, N, N % BLOCK != 0, HAS_WEIGHT)


def block_for(hidden: int, has_residual: bool) -> int:
    """The row padded to a power of two when it fits one pass, else the chunk width."""
    single_pass = MAX_SINGLE_PASS_RESIDUAL if has_residual else MAX_SINGLE_PASS
    return triton.next_power_of_2(hidden) if hidden <= single_pass else chunk_for(hidden, CHUNK)


def max_rows_for(hidden: int, has_residual: bool) -> int:
    """Most rows per tile the UB budget allows: the single-pass element count over the (padded)
    row width; one row when rows are chunked."""
    block = block_for(hidden, has_residual)
    if hidden > block:
        return 1
    return (MAX_SINGLE_PASS_RESIDUAL if has_residual else MAX_SINGLE_PASS) // block


def rows_for(hidden: int, has_residual: bool, n_rows: int, vector_cores: int) -> int:
    """Rows per tile: as many as fit (max_rows_for), but never so many that fewer row groups than
    vector cores are left (a decode batch of 32 rows keeps 32 programs busy, one row each)."""
    rows = 1
    while rows * 2 <= max_rows_for(hidden, has_residual) and n_rows // (rows * 2) >= vector_cores:
        rows *= 2
    return rows


def row_views(x: torch.Tensor, out: torch.Tensor, residual: torch.Tensor | None):
    """x, out and residual as [rows, hidden] views (residual: x when absent, never read then)."""
    hidden = x.shape[-1]
    x2, out2 = x.view(-1, hidden), out.view(-1, hidden)
    return x2, out2, (residual.view(-1, hidden) if residual is not None else x2)


def _launch(x: torch.Tensor, residual: torch.Tensor | None, out: torch.Tensor, weight: torch.Tensor | None,
            eps: float) -> None:
    hidden = x.shape[-1]
    x2, out2, res2 = row_views(x, out, residual)
    n_rows = x2.shape[0]
    if n_rows == 0:
        return
    has_residual = residual is not None
    rows = rows_for(hidden, has_residual, n_rows, core_counts(x.device)["vector"])
    rms_norm_kernel[(grid_size(x.device, triton.cdiv(n_rows, rows)),)](
        x2, res2, out2, weight if weight is not None else x2,  # x2: never read without a weight
        n_rows, x2.stride(0), res2.stride(0), out2.stride(0), eps,
        N=hidden, BLOCK=block_for(hidden, has_residual), ROWS=rows, HAS_RESIDUAL=has_residual,
        HAS_WEIGHT=weight is not None,
    )


def rms_norm(out: torch.Tensor, input: torch.Tensor, weight: torch.Tensor | None, epsilon: float) -> None:
    _launch(input, None, out, weight, epsilon)


def fused_add_rms_norm(input: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None,
                       epsilon: float) -> None:
    _launch(input, residual, input, weight, epsilon)
