"""Unified attention: a flat batch of variable-length query chunks (prefill chunks with cached
context, and decode tokens) against their keys, causal bottom-right. One persistent mix kernel
serves the paged cache (unified_attention) and dense varlen K/V (flash_attention_varlen, PAGED=False).

Work item = (query block, KV head). A query block holds BLOCK_Q consecutive tokens of one
sequence × the G query heads sharing the KV head (padded to G_PAD), flattened into the
BLOCK_M = BLOCK_Q·G_PAD rows of one tl.dot tile, so each K/V tile read serves the whole GQA group.

Work is sized by tokens, not by sequences × max_seqlen_q. Query blocks are numbered globally:
block b of sequence s starts at token cu_q[s] + b·BLOCK_Q and has global index
    start(s) + b,  start(s) = cu_q[s] // BLOCK_Q + s.
start is strictly increasing (cu_q is non-decreasing and s adds 1), and sequence s's
ceil(q_len/BLOCK_Q) blocks fit below start(s + 1): with cu_q[s] = p·BLOCK_Q + r (0 <= r < BLOCK_Q),
ceil(q_len/BLOCK_Q) <= (r + q_len) // BLOCK_Q + 1 = start(s + 1) - start(s). So a query block
never straddles two sequences, every block index is below start(B) = num_tokens // BLOCK_Q + B,
and a program finds the sequence of block g by a scalar binary search for the last s with
start(s) <= g. The indices between a sequence's last block and the next start (at most one per
sequence) exit at once. Both counts come from shapes (no device sync, graph-capturable).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ascendtile.kernels._attention import (
    attend_kv_range, check_query_tile, finish, group_rows, init_state, kv_scale_args, scale_bases, tile_n, upcast_dot,
)
from ascendtile.kernels import attention_paged
from ascendtile.platform import grid_size

# Query rows per work item: 16 (the smallest tl.dot tile) while the batch is decode-only or the
# head is wider than 128, else 32. Lowering gate, 160 KB budget (bf16, softcap and window): 32
# rows × 128 dims plan 147 KB with 64-key tiles; 64 rows of a GQA-4 group plan 191 KB at 32 or 64
# keys, so more rows would shrink the key tile below what 32 rows allow.
DECODE_ROWS, PREFILL_ROWS = 16, 32
# Dense K/V has no blocks: key tiles are position-aligned, as large as tile_n allows for the rows.
DENSE_BLOCK = 128


@triton.jit
def _sequence_of_block(cu_q_ptr, num_seqs, g, BLOCK_Q: tl.constexpr):
    """The last sequence s with start(s) = cu_q[s] // BLOCK_Q + s <= g (see the module docstring):
    a scalar binary search, log2(num_seqs) loads per work item."""
    lo = 0
    hi = num_seqs  # invariant: start(lo) <= g < start(hi), start(num_seqs) being past every block
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if tl.load(cu_q_ptr + mid) // BLOCK_Q + mid <= g:
            lo = mid
        else:
            hi = mid
    return lo


@triton.jit(do_not_specialize=["num_seqs", "num_q_blocks", "max_blocks", "num_blocks", "stride_qt", "stride_qh",
                               "stride_ot", "stride_oh", "stride_blk", "stride_tok", "stride_kh", "stride_table", "window"])
def flash_attention_kernel(
    q_ptr, k_ptr, v_ptr, out_ptr, table_ptr, cu_q_ptr, kv_ptr, ks_ptr, vs_ptr,
    num_seqs, num_q_blocks, max_blocks, num_blocks,
    stride_qt, stride_qh, stride_ot, stride_oh, stride_blk, stride_tok, stride_kh, stride_table,
    scale, softcap, window, ks_stride, vs_stride,
    NUM_KV_HEADS: tl.constexpr, GROUP: tl.constexpr, G_PAD: tl.constexpr, BLOCK_Q: tl.constexpr,
    BLOCK_M: tl.constexpr, D: tl.constexpr, D_PAD: tl.constexpr, BLOCK_SIZE: tl.constexpr, TILE_N: tl.constexpr,
    PAGED: tl.constexpr, CAUSAL: tl.constexpr, USE_SOFTCAP: tl.constexpr, USE_WINDOW: tl.constexpr,
    UPCAST_DOT: tl.constexpr, KV_QUANT: tl.constexpr,
):
    """kv_ptr: seqused_k [B] (PAGED) or cu_seqlens_k [B+1] (dense). num_q_blocks: the global query
    block count, num_tokens // BLOCK_Q + num_seqs. With PAGED the cache strides are (stride_blk,
    stride_tok, stride_kh); dense K/V rows use (stride_tok, stride_kh). ks_ptr / vs_ptr,
    ks_stride / vs_stride, KV_QUANT: an int8 paged cache's scales (_attention.kv_scale_args)."""
    rows = tl.arange(0, BLOCK_M)
    tok = rows // G_PAD  # token within the query block (row metadata only; loads use group_rows)
    head = rows % G_PAD  # query head within the GQA group
    tok_f, head_f = tok.to(tl.float32), head.to(tl.float32)
    for work in range(tl.program_id(0), num_q_blocks * NUM_KV_HEADS, tl.num_programs(0)):
        g = work // NUM_KV_HEADS
        kv_head = work % NUM_KV_HEADS
        seq = _sequence_of_block(cu_q_ptr, num_seqs, g, BLOCK_Q)
        q_start = tl.load(cu_q_ptr + seq)
        q_blk = g - (q_start // BLOCK_Q + seq)
        q_len = tl.load(cu_q_ptr + seq + 1) - q_start
        if PAGED:
            k_start = 0
            kv_len = tl.load(kv_ptr + seq)
        else:
            k_start = tl.load(kv_ptr + seq)
            kv_len = tl.load(kv_ptr + seq + 1) - k_start
        first = q_blk * BLOCK_Q
        if first < q_len:
            q_ptrs, q_mask = group_rows(q_ptr, q_start + first, q_len - first, stride_qt, kv_head * GROUP, GROUP,
                                        stride_qh, BLOCK_Q, G_PAD, D, D_PAD)
            q = tl.reshape(tl.load(q_ptrs, mask=q_mask, other=0.0), [BLOCK_M, D_PAD])
            row_ok = (tok_f < tl.cast(q_len - first, tl.float32)) & (head_f < GROUP)  # fp32: see attend_kv_range
            q_pos = kv_len - q_len + first + tok  # bottom-right aligned absolute positions

            last = kv_len - q_len + tl.minimum(first + BLOCK_Q, q_len) - 1  # newest query position in the block
            hi = kv_len
            if CAUSAL:
                hi = tl.minimum(last + 1, kv_len)
            lo = 0
            if USE_WINDOW:
                lo = tl.maximum(kv_len - q_len + first - window + 1, 0)
            if PAGED:
                hi = tl.minimum(hi, max_blocks * BLOCK_SIZE)  # never read past the table row
                k_base = k_ptr + kv_head * stride_kh
                v_base = v_ptr + kv_head * stride_kh
            else:
                k_base = k_ptr + tl.cast(k_start, tl.int64) * stride_tok + kv_head * stride_kh
                v_base = v_ptr + tl.cast(k_start, tl.int64) * stride_tok + kv_head * stride_kh
            table_row = table_ptr + tl.cast(seq, tl.int64) * stride_table
            ks_base, vs_base = scale_bases(ks_ptr, vs_ptr, kv_head, ks_stride, vs_stride, BLOCK_SIZE, KV_QUANT)

            acc, m_i, l_i = init_state(BLOCK_M, D_PAD)
            acc, m_i, l_i = attend_kv_range(
                q, acc, m_i, l_i, q_pos, row_ok, k_base, v_base, table_row, num_blocks, lo, hi,
                stride_blk, stride_tok, scale, softcap, window, ks_base, vs_base,
                PAGED, BLOCK_SIZE, TILE_N, D, D_PAD, CAUSAL, USE_SOFTCAP, USE_WINDOW, UPCAST_DOT,
                KV_QUANT, NUM_KV_HEADS,
            )
            o = tl.reshape(finish(acc, l_i), [BLOCK_Q, G_PAD, D_PAD])
            o_ptrs, o_mask = group_rows(out_ptr, q_start + first, q_len - first, stride_ot, kv_head * GROUP, GROUP,
                                        stride_oh, BLOCK_Q, G_PAD, D, D_PAD)
            tl.store(o_ptrs, o.to(out_ptr.dtype.element_ty), mask=o_mask)


def tiling(heads: int, kv_heads: int, head_size: int, block_size: int, max_seqlen_q: int,
           kv_int8: bool = False) -> dict:
    """Constexpr tile parameters for a launch (also used by the lowering cases)."""
    group = heads // kv_heads
    g_pad = triton.next_power_of_2(group)
    d_pad = triton.next_power_of_2(head_size)
    rows = DECODE_ROWS if max_seqlen_q <= 1 or d_pad > 128 else PREFILL_ROWS
    block_m = max(rows, g_pad)
    check_query_tile(block_m, d_pad)
    return dict(NUM_KV_HEADS=kv_heads, GROUP=group, G_PAD=g_pad, BLOCK_Q=block_m // g_pad, BLOCK_M=block_m,
                D=head_size, D_PAD=d_pad, BLOCK_SIZE=block_size, TILE_N=tile_n(block_size, block_m, d_pad, kv_int8))


def launch(out: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, table: torch.Tensor,
           cu_seqlens_q: torch.Tensor, kv_lens: torch.Tensor, max_seqlen_q: int, scale: float, softcap: float,
           sliding_window: int, *, paged: bool, causal: bool, kv_cache_dtype: str = "auto",
           k_scale: torch.Tensor | None = None, v_scale: torch.Tensor | None = None) -> None:
    """Shared launcher: paged (key/value = caches, kv_lens = seqused_k; int8 caches with their
    scales) or dense (key/value [Tk, KVH, D], kv_lens = cu_seqlens_k, table unused)."""
    num_seqs = cu_seqlens_q.shape[0] - 1
    if query.shape[0] == 0 or num_seqs <= 0 or max_seqlen_q == 0:
        return
    if paged:
        block_size, max_blocks, num_blocks = key.shape[1], table.shape[1], key.shape[0]
        stride_blk, stride_tok, stride_kh, stride_table = key.stride(0), key.stride(1), key.stride(2), table.stride(0)
    else:
        block_size, max_blocks, num_blocks = DENSE_BLOCK, 0, 0  # dense: tiles are position-aligned, no blocks
        stride_blk, stride_tok, stride_kh, stride_table = 0, key.stride(0), key.stride(1), 0
    params = tiling(query.shape[1], key.shape[-2], query.shape[2], block_size, max_seqlen_q, kv_cache_dtype == "int8")
    num_q_blocks = query.shape[0] // params["BLOCK_Q"] + num_seqs  # a bound on the blocks (module docstring)
    work = num_q_blocks * params["NUM_KV_HEADS"]
    flash_attention_kernel[(grid_size(query.device, work, uses_dot=True),)](
        query, key, value, out, table, cu_seqlens_q, kv_lens,
        num_seqs=num_seqs, num_q_blocks=num_q_blocks, max_blocks=max_blocks, num_blocks=num_blocks,
        stride_qt=query.stride(0), stride_qh=query.stride(1), stride_ot=out.stride(0), stride_oh=out.stride(1),
        stride_blk=stride_blk, stride_tok=stride_tok, stride_kh=stride_kh, stride_table=stride_table,
        scale=scale, softcap=softcap, window=sliding_window,
        PAGED=paged, CAUSAL=causal, USE_SOFTCAP=softcap > 0, USE_WINDOW=sliding_window > 0,
        UPCAST_DOT=upcast_dot(query.dtype), **kv_scale_args(kv_cache_dtype, k_scale, v_scale, query), **params,
    )


def unified_attention(out: torch.Tensor, query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                      block_table: torch.Tensor, cu_seqlens_q: torch.Tensor, seqused_k: torch.Tensor,
                      max_seqlen_q: int, max_seqlen_k: int, scale: float, softcap: float, sliding_window: int,
                      kv_cache_dtype: str = "auto", k_scale: torch.Tensor | None = None,
                      v_scale: torch.Tensor | None = None) -> None:
    if max_seqlen_q == 1:
        # A decode-only step: the paged decode kernels, which split long contexts over idle cores.
        attention_paged.decode(out, query, key_cache, value_cache, block_table, seqused_k, cu_seqlens_q, scale,
                               softcap, sliding_window, kv_cache_dtype=kv_cache_dtype, k_scale=k_scale,
                               v_scale=v_scale)
        return
    launch(out, query, key_cache, value_cache, block_table, cu_seqlens_q, seqused_k, max_seqlen_q, scale, softcap,
           sliding_window, paged=True, causal=True, kv_cache_dtype=kv_cache_dtype, k_scale=k_scale, v_scale=v_scale)
