"""Paged decode attention (one query token per sequence) with split-KV (flash-decoding).

Work item = (sequence, KV head, KV split). The G query heads sharing a KV head form the rows of
one tl.dot tile (padded to 16, the smallest dot operand), so each K/V tile is read once per
group. With one split the kernel writes the output directly. When the batch is too small to
occupy the cores and the block table can hold long contexts, each sequence's own key range
(its length, or its window) is cut into `num_splits` TILE_N-aligned slices of at least
MIN_SPLIT_TOKENS keys, computed in the kernel from seq_lens: the decode kernel writes per-split partial state
(unnormalised acc, running max m, denominator l, all fp32) and a vector reduce kernel merges
them: out = Σ_s acc_s·e^(m_s − M) / Σ_s l_s·e^(m_s − M), M = max_s m_s. The split count comes
from shapes only (batch, heads, table capacity): no host sync, graph-capturable.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ascendtile.kernels._attention import (
    attend_kv_range, check_query_tile, finish, group_rows, init_state, kv_scale_args, scale_bases, tile_n, upcast_dot,
    work_coords,
)
from ascendtile.kernels._reduce import fast_max
from ascendtile.platform import core_counts, grid_size

MIN_ROWS = 16  # tl.dot needs M >= 16
MAX_SPLITS = 16
MIN_SPLIT_TOKENS = 256  # shorter slices cost more in partial writes than they gain in parallelism


@triton.jit(do_not_specialize=["num_seqs", "num_splits", "max_blocks", "num_blocks", "stride_qt", "stride_qh",
                               "stride_ot", "stride_oh", "stride_blk", "stride_tok", "stride_kh", "stride_table",
                               "window"])
def paged_decode_kernel(
    q_ptr, k_ptr, v_ptr, out_ptr, table_ptr, lens_ptr, cu_q_ptr, acc_ws, m_ws, l_ws, ks_ptr, vs_ptr,
    num_seqs, num_splits, max_blocks, num_blocks,
    stride_qt, stride_qh, stride_ot, stride_oh, stride_blk, stride_tok, stride_kh, stride_table,
    scale, softcap, window, ks_stride, vs_stride,
    NUM_KV_HEADS: tl.constexpr, GROUP: tl.constexpr, H_PAD: tl.constexpr, D: tl.constexpr, D_PAD: tl.constexpr,
    BLOCK_SIZE: tl.constexpr, TILE_N: tl.constexpr, SPLIT: tl.constexpr, USE_SOFTCAP: tl.constexpr,
    USE_WINDOW: tl.constexpr, UPCAST_DOT: tl.constexpr, VARLEN_Q: tl.constexpr, MIN_SPLIT: tl.constexpr,
    KV_QUANT: tl.constexpr,
):
    """SPLIT: write partials to acc_ws [B, H, num_splits, D_PAD], m_ws / l_ws [B, H, num_splits]
    (fp32, contiguous) instead of out. VARLEN_Q: sequence b's query is row cu_q[b] and exists only
    if cu_q[b + 1] > cu_q[b] (a decode-only unified_attention batch); else it is row b. ks_ptr /
    vs_ptr, ks_stride / vs_stride, KV_QUANT: an int8 cache's scales (_attention.kv_scale_args)."""
    rows = tl.arange(0, H_PAD)
    row_ok = rows < GROUP
    offs_d = tl.arange(0, D_PAD)
    heads = NUM_KV_HEADS * GROUP
    total = num_seqs * NUM_KV_HEADS * num_splits
    for work in range(tl.program_id(0), total, tl.num_programs(0)):
        seq, kv_head, split = work_coords(work, num_splits, NUM_KV_HEADS)
        kv_len = tl.load(lens_ptr + seq)
        q_row, n_q = _query_row(cu_q_ptr, seq, VARLEN_Q)
        q_pos = tl.zeros([H_PAD], dtype=tl.int32) + kv_len - 1  # the query is the newest token
        # This sequence's keys [first, kv_len) in TILE_N-aligned slices (so no tile straddles two).
        first = 0
        if USE_WINDOW:
            first = (tl.maximum(kv_len - window, 0) // TILE_N) * TILE_N
        split_len = tl.maximum(tl.cdiv(tl.cdiv(kv_len - first, num_splits), TILE_N) * TILE_N, MIN_SPLIT)
        lo = first + split * split_len
        if USE_WINDOW:
            lo = tl.maximum(lo, kv_len - window)
        hi = tl.minimum(tl.minimum(kv_len, first + (split + 1) * split_len), max_blocks * BLOCK_SIZE)

        q_ptrs, q_mask = group_rows(q_ptr, q_row, n_q, stride_qt, kv_head * GROUP, GROUP, stride_qh, 1, H_PAD, D, D_PAD)
        q = tl.reshape(tl.load(q_ptrs, mask=q_mask, other=0.0), [H_PAD, D_PAD])
        acc, m_i, l_i = init_state(H_PAD, D_PAD)
        ks_base, vs_base = scale_bases(ks_ptr, vs_ptr, kv_head, ks_stride, vs_stride, BLOCK_SIZE, KV_QUANT)
        # Keys < hi <= kv_len are all at or before the query: no causal mask needed.
        acc, m_i, l_i = attend_kv_range(
            q, acc, m_i, l_i, q_pos, row_ok, k_ptr + kv_head * stride_kh, v_ptr + kv_head * stride_kh,
            table_ptr + tl.cast(seq, tl.int64) * stride_table, num_blocks, lo, hi,
            stride_blk, stride_tok, scale, softcap, window, ks_base, vs_base,
            True, BLOCK_SIZE, TILE_N, D, D_PAD, False, USE_SOFTCAP, USE_WINDOW, UPCAST_DOT, KV_QUANT, NUM_KV_HEADS,
        )
        if SPLIT:
            # Row r is query head kv_head·G + r: partial rows are num_splits apart.
            slot = (tl.cast(seq, tl.int64) * heads + kv_head * GROUP + rows) * num_splits + split
            tl.store(acc_ws + slot[:, None] * D_PAD + offs_d[None, :], acc, mask=row_ok[:, None])
            tl.store(m_ws + slot, m_i, mask=row_ok)
            tl.store(l_ws + slot, l_i, mask=row_ok)
        else:
            o = tl.reshape(finish(acc, l_i), [1, H_PAD, D_PAD])
            o_ptrs, o_mask = group_rows(out_ptr, q_row, n_q, stride_ot, kv_head * GROUP, GROUP, stride_oh,
                                        1, H_PAD, D, D_PAD)
            tl.store(o_ptrs, o.to(out_ptr.dtype.element_ty), mask=o_mask)


@triton.jit
def _query_row(cu_q_ptr, seq, VARLEN_Q: tl.constexpr):
    """(row of sequence seq's query token, 1 or 0 query tokens)."""
    if VARLEN_Q:
        q_row = tl.load(cu_q_ptr + seq)
        return q_row, tl.load(cu_q_ptr + seq + 1) - q_row
    return seq, 1


@triton.jit(do_not_specialize=["num_rows", "num_splits", "stride_ot", "stride_oh"])
def paged_reduce_kernel(
    out_ptr, acc_ws, m_ws, l_ws, cu_q_ptr, num_rows, num_splits, stride_ot, stride_oh,
    HEADS: tl.constexpr, D: tl.constexpr, D_PAD: tl.constexpr, S_PAD: tl.constexpr, VARLEN_Q: tl.constexpr,
):
    """Merge the split partials of each (sequence, head) row: one contiguous [S, D_PAD] slab."""
    offs_s = tl.arange(0, S_PAD)
    offs_d = tl.arange(0, D_PAD)
    s_ok = offs_s < num_splits
    for row in range(tl.program_id(0), num_rows, tl.num_programs(0)):
        base = tl.cast(row, tl.int64) * num_splits
        m = tl.load(m_ws + base + offs_s, mask=s_ok, other=float("-inf"))
        l = tl.load(l_ws + base + offs_s, mask=s_ok, other=0.0)
        acc = tl.load(acc_ws + (base + offs_s)[:, None] * D_PAD + offs_d[None, :], mask=s_ok[:, None], other=0.0)
        m_max = fast_max(m, 0)
        m_ref = tl.where(m_max == float("-inf"), 0.0, m_max)  # no split saw a key: weights 0, out 0
        w = tl.exp(m - m_ref)
        denom = tl.sum(l * w, 0)
        o = tl.sum(acc * w[:, None], 0) / tl.where(denom > 0.0, denom, 1.0)
        q_row, n_q = _query_row(cu_q_ptr, row // HEADS, VARLEN_Q)
        dst = out_ptr + tl.cast(q_row, tl.int64) * stride_ot + (row % HEADS) * stride_oh
        tl.store(dst + offs_d, o.to(out_ptr.dtype.element_ty), mask=(offs_d < D) & (n_q > 0))


def tiling(heads: int, kv_heads: int, head_size: int, block_size: int, kv_int8: bool = False) -> dict:
    group = heads // kv_heads
    h_pad = max(MIN_ROWS, triton.next_power_of_2(group))
    d_pad = triton.next_power_of_2(head_size)
    check_query_tile(h_pad, d_pad)
    return dict(NUM_KV_HEADS=kv_heads, GROUP=group, H_PAD=h_pad, D=head_size, D_PAD=d_pad, BLOCK_SIZE=block_size,
                TILE_N=tile_n(block_size, h_pad, d_pad, kv_int8))


def choose_splits(device: torch.device, batch: int, kv_heads: int, capacity: int) -> int:
    """Split the KV range only when (sequence, KV head) items cannot fill the cube cores and the
    table can hold a context long enough to be worth cutting (shapes only: no device sync)."""
    items = batch * kv_heads
    cores = core_counts(device)["cube"]
    if items >= cores or capacity < 2 * MIN_SPLIT_TOKENS:
        return 1
    return max(1, min(MAX_SPLITS, triton.cdiv(cores, items), capacity // MIN_SPLIT_TOKENS))


def paged_attention(out: torch.Tensor, query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                    block_tables: torch.Tensor, seq_lens: torch.Tensor, scale: float, softcap: float,
                    sliding_window: int, kv_cache_dtype: str = "auto", k_scale: torch.Tensor | None = None,
                    v_scale: torch.Tensor | None = None, num_splits: int | None = None) -> None:
    """Launcher of the paged_attention op. num_splits forces the KV split count (1 = no split,
    the reduce kernel is skipped); None picks it from the shapes (choose_splits)."""
    decode(out, query, key_cache, value_cache, block_tables, seq_lens, None, scale, softcap, sliding_window,
           num_splits, kv_cache_dtype=kv_cache_dtype, k_scale=k_scale, v_scale=v_scale)


def decode(out: torch.Tensor, query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
           block_tables: torch.Tensor, seq_lens: torch.Tensor, cu_seqlens_q: torch.Tensor | None, scale: float,
           softcap: float, sliding_window: int, num_splits: int | None = None, *, kv_cache_dtype: str = "auto",
           k_scale: torch.Tensor | None = None, v_scale: torch.Tensor | None = None) -> None:
    """Decode over the paged cache, one query token per sequence (of B = seq_lens' length); with
    cu_seqlens_q (a unified_attention batch whose max_seqlen_q is 1) sequence b's token is row
    cu_seqlens_q[b] of query, or absent. An int8 cache comes with its scales (kv_scale_args)."""
    batch = seq_lens.shape[0]
    heads, head_size = query.shape[1], query.shape[2]
    if batch == 0 or query.shape[0] == 0:
        return
    varlen_q = cu_seqlens_q is not None
    cu_q = cu_seqlens_q if varlen_q else seq_lens  # unused when not varlen_q
    kv_heads, block_size = key_cache.shape[2], key_cache.shape[1]
    params = tiling(heads, kv_heads, head_size, block_size, kv_cache_dtype == "int8")
    capacity = block_tables.shape[1] * block_size
    splits = num_splits or choose_splits(query.device, batch, kv_heads, capacity)
    # A forced split count (tests) may cut short sequences finely; the chosen one keeps slices long.
    min_split = params["TILE_N"] if num_splits else triton.cdiv(MIN_SPLIT_TOKENS, params["TILE_N"]) * params["TILE_N"]
    if splits > 1:
        acc_ws = torch.empty((batch, heads, splits, params["D_PAD"]), dtype=torch.float32, device=query.device)
        m_ws, l_ws = torch.empty((2, batch, heads, splits), dtype=torch.float32, device=query.device)
    else:
        acc_ws = m_ws = l_ws = out  # unused
    paged_decode_kernel[(grid_size(query.device, batch * kv_heads * splits, uses_dot=True),)](
        query, key_cache, value_cache, out, block_tables, seq_lens, cu_q, acc_ws, m_ws, l_ws,
        num_seqs=batch, num_splits=splits, max_blocks=block_tables.shape[1], num_blocks=key_cache.shape[0],
        stride_qt=query.stride(0), stride_qh=query.stride(1), stride_ot=out.stride(0), stride_oh=out.stride(1),
        stride_blk=key_cache.stride(0), stride_tok=key_cache.stride(1), stride_kh=key_cache.stride(2),
        stride_table=block_tables.stride(0), scale=scale, softcap=softcap, window=sliding_window,
        SPLIT=splits > 1, USE_SOFTCAP=softcap > 0, USE_WINDOW=sliding_window > 0,
        UPCAST_DOT=upcast_dot(query.dtype), VARLEN_Q=varlen_q, MIN_SPLIT=min_split,
        **kv_scale_args(kv_cache_dtype, k_scale, v_scale, query), **params,
    )
    if splits > 1:
        paged_reduce_kernel[(grid_size(query.device, batch * heads),)](
            out, acc_ws, m_ws, l_ws, cu_q, batch * heads, splits, out.stride(0), out.stride(1),
            HEADS=heads, D=head_size, D_PAD=params["D_PAD"], S_PAD=triton.next_power_of_2(splits), VARLEN_Q=varlen_q,
        )
