"""Causal attention mask for a padded batch: a vector kernel persistent over the B × max_q rows.

Each program reads its row's q_len and kv_len as int32 scalars (int32 keeps the column compares
vectorised on Ascend), then writes the row in BLOCK-wide column chunks: 0 where the key is
visible (bottom-right aligned, optional sliding window), fill_value elsewhere.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ascendtile.platform import grid_size

MAX_BLOCK = 2048


@triton.jit(do_not_specialize=["n_rows", "max_q", "max_kv", "b_stride", "q_stride", "sliding_window"])
def causal_mask_kernel(
    out_ptr, q_lens_ptr, kv_lens_ptr,
    n_rows, max_q, max_kv, b_stride, q_stride, fill_value, sliding_window,
    BLOCK: tl.constexpr,
):
    cols = tl.arange(0, BLOCK)
    for row in range(tl.program_id(0), n_rows, tl.num_programs(0)):
        b = row // max_q
        i = row - b * max_q
        q_len = tl.load(q_lens_ptr + b).to(tl.int32)
        kv_len = tl.load(kv_lens_ptr + b).to(tl.int32)
        newest = i + kv_len - q_len  # the last key this query may see
        # Keys visible: (oldest, min(newest, kv_len - 1)]; a padding row (i >= q_len) sees none.
        oldest = tl.where(sliding_window > 0, newest - sliding_window, -1)
        newest = tl.where(i < q_len, tl.minimum(newest, kv_len - 1), -1)
        out_row = out_ptr + tl.cast(b, tl.int64) * b_stride + tl.cast(i, tl.int64) * q_stride
        for start in range(0, max_kv, BLOCK):
            j = start + cols
            visible = (j <= newest) & (j > oldest)
            tl.store(out_row + j, tl.where(visible, 0.0, fill_value).to(out_ptr.dtype.element_ty), mask=j < max_kv)


def block_for(max_kv: int) -> int:
    return min(triton.next_power_of_2(max(max_kv, 1)), MAX_BLOCK)


def causal_mask(out: torch.Tensor, q_lens: torch.Tensor, kv_lens: torch.Tensor, fill_value: float,
                sliding_window: int) -> None:
    batch, max_q, max_kv = out.shape
    rows = batch * max_q
    if rows == 0 or max_kv == 0:
        return
    causal_mask_kernel[(grid_size(out.device, rows),)](
        out, q_lens, kv_lens, rows, max_q, max_kv, out.stride(0), out.stride(1), fill_value, sliding_window,
        BLOCK=block_for(max_kv),
    )
