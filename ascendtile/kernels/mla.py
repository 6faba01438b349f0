"""Absorbed MLA attention over the paged latent cache (DeepSeek-V2/V3 decode and chunked prefill).

Work item = (query token, tile of BLOCK_H heads, KV split). The heads are the tl.dot M dimension:
all query heads of one token attend to the same single latent KV head, so one cache tile serves
BLOCK_H heads. Scores are q_nope·k_nope (the L = kv_lora_rank part) plus q_pe·k_pe (the R rope
part) as two dots, so no [*, L+R] tile is built; V is the same k_nope tile (the first L cache
columns), so each cache row is read once. A cache block is read as BLOCK_N-row slices addressed
from its scalar block id (contiguous tile loads, no gathers). Tile loads, the softmax state and
the interpreter-safe dot come from _attention.py; the step itself is MLA's own (two score dots,
V taken from the K tile), which _attention.attend_tile (one dot, separate K and V) does not cover.

Split-KV: when tokens x head tiles would leave cube cores idle (decode at small batch) and the
context is long, work items also split the key range; each writes its normalised partial output
and log2-sum-exp to an fp32 workspace of padded [BLOCK_H, BLOCK_L] tiles, and a vector kernel
merges the splits.

An int8 latent cache (KV_QUANT, ops/_kv_quant.py) is read as the float one is, its tiles converted
to the query's dtype (exact), and the scales applied as in _attention.py: dynamic (per token, one
scale for the latent and one for the rope part, the rows of the [num_blocks, 2, block_size] scale
cache) to the two score dots' columns and to P's columns before the P·V dot; static (one scale)
folded into the softmax scale and applied to the accumulator after the loop.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ascendtile.kernels import _attention
from ascendtile.kernels._attention import (
    KV_FLOAT, KV_INT8_DYNAMIC, KV_INT8_STATIC, as_dot_operand, dot, finish, init_state, load_kv_tile, upcast_dot,
)
from ascendtile.kernels._reduce import fast_max
from ascendtile.platform import core_counts, grid_size

MIN_KEYS_PER_SPLIT = 128  # shorter splits cost more in workspace traffic and merging than they gain
MERGE_TILE = 4096  # elements of a merge step's [BLOCK_H, BLOCK_D] fp32 tile (merge_block_d)
LOG2E = 1.4426950408889634


@triton.jit
def _visible_keys(seq_ids_ptr, cu_ptr, seqused_ptr, t):
    """(sequence of token t, keys it sees): bottom-right causal; 0 for a token past its sequence."""
    b = tl.load(seq_ids_ptr + t)
    q_start = tl.load(cu_ptr + b)
    q_len = tl.load(cu_ptr + b + 1) - q_start
    kv_len = tl.load(seqused_ptr + b)
    i = t - q_start
    visible = tl.minimum(tl.maximum(kv_len - q_len + i + 1, 0), kv_len)
    return b, tl.where(i < q_len, visible, 0)


@triton.jit(do_not_specialize=["num_heads", "work_items", "num_splits", "keys_per_split", "num_blocks", "stride_qt",
                               "stride_qh", "stride_kb", "stride_ks", "stride_bt", "stride_ot", "stride_oh"])
def mla_attention_kernel(
    q_ptr, kv_ptr, bt_ptr, seq_ids_ptr, cu_ptr, seqused_ptr, out_ptr, part_ptr, lse_ptr, kv_scale_ptr,
    num_heads, work_items, num_splits, keys_per_split, num_blocks,
    stride_qt, stride_qh, stride_kb, stride_ks, stride_bt, stride_ot, stride_oh, qk_scale_log2,
    L: tl.constexpr, R: tl.constexpr, BLOCK_L: tl.constexpr, BLOCK_R: tl.constexpr,
    BLOCK_SIZE: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT: tl.constexpr,
    UPCAST_DOT: tl.constexpr, KV_QUANT: tl.constexpr,
):
    """kv_scale_ptr: an int8 cache's scale cache [num_blocks, 2, BLOCK_SIZE] (KV_INT8_DYNAMIC) or
    its static scale (KV_INT8_STATIC); unused for a float cache."""
    rn_f = tl.arange(0, BLOCK_N).to(tl.float32)
    if KV_QUANT == _attention.KV_INT8_STATIC_C:
        qk_scale_log2 = qk_scale_log2 * tl.load(kv_scale_ptr)
    rh = tl.arange(0, BLOCK_H)
    rn = tl.arange(0, BLOCK_N)
    dl = tl.arange(0, BLOCK_L)
    dr = tl.arange(0, BLOCK_R)
    head_tiles = tl.cdiv(num_heads, BLOCK_H)
    tiles = work_items // num_splits
    for w in range(tl.program_id(0), work_items, tl.num_programs(0)):
        tile = w // num_splits
        split = w % num_splits
        t = tile // head_tiles
        h0 = (tile % head_tiles) * BLOCK_H
        b, visible = _visible_keys(seq_ids_ptr, cu_ptr, seqused_ptr, t)
        # The token's heads are rows of the query tile (padding heads read as 0, never stored).
        q_base = q_ptr + tl.cast(t, tl.int64) * stride_qt + h0 * stride_qh
        q_nope = load_kv_tile(q_base, rh, dl, stride_qh, num_heads - h0, L, BLOCK_L)
        q_pe = load_kv_tile(q_base + L, rh, dr, stride_qh, num_heads - h0, R, BLOCK_R)

        acc, _, l = init_state(BLOCK_H, BLOCK_L)
        # The running max starts finite, not at -inf: a slice emptied by a bad block id before any
        # visible key keeps it there, and exp2(m - m_new) stays 1 instead of exp2(-inf - -inf) = NaN.
        m = tl.full([BLOCK_H], -1.0e30, dtype=tl.float32)
        start = split * keys_per_split
        # The last split runs to the sequence's end, so the key range never depends on the host's
        # max_seqlen_k being current (e.g. in a replayed graph).
        end = tl.where(split == num_splits - 1, visible, tl.minimum(start + keys_per_split, visible))
        table_row = bt_ptr + tl.cast(b, tl.int64) * stride_bt
        for k0 in range(start, end, BLOCK_N):
            block_id = tl.load(table_row + k0 // BLOCK_SIZE)
            # A bad block id (scalar compares) empties the slice instead of reading outside the cache.
            block_ok = (block_id >= 0) & (block_id < num_blocks)
            n_keys = tl.where(block_ok, end - k0, 0)
            rows = kv_ptr + tl.cast(tl.where(block_ok, block_id, 0), tl.int64) * stride_kb + (k0 % BLOCK_SIZE) * stride_ks
            # Keys past `end` read as 0: unused cache slots may hold NaN, which would poison p @ v.
            k_nope = as_dot_operand(load_kv_tile(rows, rn, dl, stride_ks, n_keys, L, BLOCK_L), q_nope, UPCAST_DOT)
            k_pe = as_dot_operand(load_kv_tile(rows + L, rn, dr, stride_ks, n_keys, R, BLOCK_R), q_nope, UPCAST_DOT)
            # fp32 compare: integer vector compares are scalar code on A2/A3
            in_tile = rn_f < tl.cast(n_keys, tl.float32)
            if KV_QUANT == _attention.KV_INT8_DYNAMIC_C:
                # the keys' latent and rope scales: contiguous runs of the block's two scale rows
                # (0 past n_keys, where the slots may hold NaN)
                s_row = (kv_scale_ptr + tl.cast(tl.where(block_ok, block_id, 0), tl.int64) * (2 * BLOCK_SIZE)
                         + k0 % BLOCK_SIZE)
                c_scale = tl.load(s_row + rn, mask=in_tile, other=0.0)
                pe_scale = tl.load(s_row + BLOCK_SIZE + rn, mask=in_tile, other=0.0)
                s = (dot(q_nope, tl.trans(k_nope), UPCAST_DOT) * c_scale[None, :]
                     + dot(q_pe, tl.trans(k_pe), UPCAST_DOT) * pe_scale[None, :])
            else:
                s = dot(q_nope, tl.trans(k_nope), UPCAST_DOT) + dot(q_pe, tl.trans(k_pe), UPCAST_DOT)
            s = tl.where(in_tile[None, :], s * qk_scale_log2, float("-inf"))
            m_new = tl.maximum(m, fast_max(s, 1))  # finite: m starts finite
            alpha = tl.exp2(m - m_new)
            p = tl.exp2(s - m_new[:, None])
            l = l * alpha + tl.sum(p, 1)
            if KV_QUANT == _attention.KV_INT8_DYNAMIC_C:
                p = p * c_scale[None, :]
            acc = acc * alpha[:, None] + dot(p.to(k_nope.dtype), k_nope, UPCAST_DOT)  # V = the k_nope tile
            m = m_new

        if KV_QUANT == _attention.KV_INT8_STATIC_C:
            acc = acc * tl.load(kv_scale_ptr)
        o = finish(acc, l)  # no visible key: 0, not NaN
        if SPLIT:
            slot = tl.cast(split * tiles + tile, tl.int64) * BLOCK_H
            tl.store(part_ptr + slot * BLOCK_L + rh[:, None] * BLOCK_L + dl[None, :], o)
            tl.store(lse_ptr + slot + rh, tl.where(l > 0.0, m + tl.log2(tl.where(l > 0.0, l, 1.0)), float("-inf")))
        else:
            out_rows = out_ptr + tl.cast(t, tl.int64) * stride_ot + h0 * stride_oh + rh[:, None] * stride_oh
            tl.store(out_rows + dl[None, :], o.to(out_ptr.dtype.element_ty), mask=(rh < num_heads - h0)[:, None] & (dl < L)[None, :])


@triton.jit(do_not_specialize=["num_heads", "tiles", "num_splits", "stride_ot", "stride_oh"])
def mla_merge_kernel(
    part_ptr, lse_ptr, out_ptr, num_heads, tiles, num_splits, stride_ot, stride_oh,
    L: tl.constexpr, BLOCK_L: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr,
):
    rh = tl.arange(0, BLOCK_H)
    dd = tl.arange(0, BLOCK_D)
    head_tiles = tl.cdiv(num_heads, BLOCK_H)
    for tile in range(tl.program_id(0), tiles, tl.num_programs(0)):
        t = tile // head_tiles
        h0 = (tile % head_tiles) * BLOCK_H
        m = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
        for s in range(num_splits):
            m = tl.maximum(m, tl.load(lse_ptr + tl.cast(s * tiles + tile, tl.int64) * BLOCK_H + rh))
        m = tl.where(m == float("-inf"), 0.0, m)  # no split saw a key: every weight is 0
        out_rows = out_ptr + tl.cast(t, tl.int64) * stride_ot + h0 * stride_oh + rh[:, None] * stride_oh
        for d0 in range(0, L, BLOCK_D):
            total = tl.zeros([BLOCK_H], dtype=tl.float32)
            acc = tl.zeros([BLOCK_H, BLOCK_D], dtype=tl.float32)
            for s in range(num_splits):
                slot = tl.cast(s * tiles + tile, tl.int64) * BLOCK_H
                weight = tl.exp2(tl.load(lse_ptr + slot + rh) - m)
                total += weight
                acc += weight[:, None] * tl.load(part_ptr + slot * BLOCK_L + rh[:, None] * BLOCK_L + d0 + dd[None, :])
            o = acc / tl.where(total > 0.0, total, 1.0)[:, None]
            mask = (rh < num_heads - h0)[:, None] & (dd < L - d0)[None, :]
            tl.store(out_rows + d0 + dd[None, :], o.to(out_ptr.dtype.element_ty), mask=mask)


def block_h_for(lora: int, heads: int) -> int:
    """Heads per tile: all of them up to a cap (a power of two, at least 16 for tl.dot), so no
    padded rows when the head count is a power of two. The [BLOCK_H, L] fp32 accumulator bounds
    the cap (lowering gate, 160 KB of UB, bf16 split-KV: L=512 plans 84 KB at 16 heads × 32 keys
    and 165 KB at 32 heads × 16 keys; L=128 plans 122 KB at 64 heads × 128 keys)."""
    return min(16 if lora > 256 else 64, max(16, triton.next_power_of_2(heads)))


def block_n_for(lora: int, block_size: int, kv_int8: bool = False) -> int:
    """Keys per step, the largest power of two dividing the block size (a slice never straddles
    two blocks), at most 32 at L=512 (64 keys overflow L1, 512 KB: the compiler then drops
    multibuffering) and 128 at L=128 (see block_h_for), 64 over an int8 cache (its tiles'
    conversion to the query dtype takes UB too: L=128 × 128 keys planned 181-190 KB, × 64 150 KB;
    L=512 × 32 keys 149 KB)."""
    return min(32 if lora > 256 else 64 if kv_int8 else 128, block_size & -block_size)


def merge_block_d(block_l: int, block_h: int) -> int:
    """Latent columns per merge step: [BLOCK_H, BLOCK_D] fp32 tiles of MERGE_TILE elements
    (lowering gate: 2048 elements plan 50 KB of UB, 4096 plan 100 KB)."""
    return min(block_l, MERGE_TILE // block_h)


def plan_splits(work: int, max_seqlen_k: int, block_size: int, cores: int) -> tuple[int, int]:
    """(num_splits, keys_per_split, a multiple of the block size) for `work` token x head tiles."""
    if work >= cores or max_seqlen_k < 2 * MIN_KEYS_PER_SPLIT:
        return 1, max(max_seqlen_k, 1)
    splits = min(triton.cdiv(cores, work), max_seqlen_k // MIN_KEYS_PER_SPLIT)
    keys = triton.cdiv(triton.cdiv(max_seqlen_k, splits), block_size) * block_size
    return triton.cdiv(max_seqlen_k, keys), keys


def mla_attention(out: torch.Tensor, query: torch.Tensor, kv_cache: torch.Tensor, block_table: torch.Tensor,
                  cu_seqlens_q: torch.Tensor, seqused_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int,
                  kv_lora_rank: int, scale: float, kv_cache_dtype: str = "auto",
                  kv_scale: torch.Tensor | None = None) -> None:
    tokens, heads, dim = query.shape
    if tokens == 0:
        return
    lora, rope, block_size = kv_lora_rank, dim - kv_lora_rank, kv_cache.shape[1]
    block_h, block_l = block_h_for(lora, heads), triton.next_power_of_2(lora)
    tiles = tokens * triton.cdiv(heads, block_h)
    splits, keys_per_split = plan_splits(tiles, max_seqlen_k, block_size, core_counts(query.device)["cube"])
    # Token -> sequence on the device (no host sync): the count of sequence ends at or before t.
    seq_ids = torch.searchsorted(cu_seqlens_q[1:], torch.arange(tokens, device=query.device, dtype=torch.int32), right=True)
    seq_ids = seq_ids.clamp_(max=max(seqused_k.shape[0] - 1, 0)).to(torch.int32)
    if splits > 1:
        part = torch.empty((splits, tiles, block_h, block_l), dtype=torch.float32, device=query.device)
        lse = torch.empty((splits, tiles, block_h), dtype=torch.float32, device=query.device)
    else:
        part = lse = out  # unused
    work = tiles * splits
    if kv_cache_dtype == "int8":
        kv_quant = KV_INT8_DYNAMIC if kv_scale.dim() == 3 else KV_INT8_STATIC
    else:
        kv_quant, kv_scale = KV_FLOAT, query  # never read
    mla_attention_kernel[(grid_size(query.device, work, uses_dot=True),)](
        query, kv_cache, block_table, seq_ids, cu_seqlens_q, seqused_k, out, part, lse, kv_scale,
        heads, work, splits, keys_per_split, kv_cache.shape[0],
        query.stride(0), query.stride(1), kv_cache.stride(0), kv_cache.stride(1), block_table.stride(0),
        out.stride(0), out.stride(1), scale * LOG2E,
        L=lora, R=rope, BLOCK_L=block_l, BLOCK_R=triton.next_power_of_2(rope), BLOCK_SIZE=block_size,
        BLOCK_H=block_h, BLOCK_N=block_n_for(lora, block_size, kv_quant != KV_FLOAT), SPLIT=splits > 1,
        UPCAST_DOT=upcast_dot(query.dtype), KV_QUANT=kv_quant,
    )
    if splits > 1:
        mla_merge_kernel[(grid_size(query.device, tiles),)](
            part, lse, out, heads, tiles, splits, out.stride(0), out.stride(1),
            L=lora, BLOCK_L=block_l, BLOCK_H=block_h, BLOCK_D=merge_block_d(block_l, block_h),
        )
