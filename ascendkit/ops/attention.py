"""Ops: unified_attention (mixed prefill/decode over the paged KV cache), paged_attention
(decode), flash_attention_varlen (dense varlen prefill).

Cache layout [num_blocks, block_size, num_kv_heads, head_size]; block tables int32 [B, max_blocks]
with -1 padding that is never read. Visibility of key j to the query at absolute position p:
j < kv_len, causal j <= p (new tokens are the last q_len of the kv_len: bottom-right aligned),
sliding_window w > 0: p - w < j (HF/vLLM: the query and the w - 1 keys before it). softcap c > 0:
scores = c·tanh(scores / c). A query with no visible key (e.g. seqused_k == 0) gets 0.
"""
from __future__ import annotations

import torch

from ascendkit.ops._registry import register_op
from ascendkit.ops._validate import (
    FLOAT_DTYPES, check_positive, check_same_device, check_same_dtype, check_shape, check_tensor,
)
from ascendkit.ops.reference import attention as reference

# Kernels read a cache block as 16-row tiles (the smallest tl.dot operand) and keep a head of up to
# 256 dims on chip.
BLOCK_SIZE_MULTIPLE = 16
MAX_HEAD_SIZE = 256


def _is_real_cpu(t: torch.Tensor) -> bool:
    """Host-readable without a device sync (not a fake/meta tensor, not on an accelerator)."""
    return t.device.type == "cpu" and not torch._subclasses.fake_tensor.is_fake(t)


def _check_query_out(query: torch.Tensor, out: torch.Tensor, qname: str) -> None:
    check_tensor(qname, query, dtypes=FLOAT_DTYPES, ndim=3)
    check_tensor("out", out, dtypes=FLOAT_DTYPES, ndim=3)
    check_shape("out", out, query.shape, f"same as {qname}")
    if not 0 < query.shape[2] <= MAX_HEAD_SIZE:
        raise ValueError(f"{qname}: head size {query.shape[2]} must be in [1, {MAX_HEAD_SIZE}]")


def _check_heads(kv_name: str, kv: torch.Tensor, query: torch.Tensor, kv_heads: int) -> None:
    if kv.shape[-1] != query.shape[2]:
        raise ValueError(f"{kv_name}: head size {kv.shape[-1]} differs from the query's {query.shape[2]}")
    if kv_heads == 0 or query.shape[1] % kv_heads:
        raise ValueError(f"{kv_name}: num_kv_heads {kv_heads} must divide the query's num_heads {query.shape[1]}")


def _check_paged(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, table_name: str,
                 table: torch.Tensor, batch: int) -> int:
    """Cache/table checks shared by the paged ops; returns the table's capacity in tokens."""
    check_tensor("key_cache", key_cache, dtypes=FLOAT_DTYPES, ndim=4)
    check_tensor("value_cache", value_cache, dtypes=FLOAT_DTYPES, ndim=4)
    check_tensor(table_name, table, dtypes=(torch.int32,), ndim=2)
    check_shape("value_cache", value_cache, key_cache.shape, "same as key_cache")
    _check_heads("key_cache", key_cache, query, key_cache.shape[2])
    if key_cache.shape[1] % BLOCK_SIZE_MULTIPLE:
        raise ValueError(f"key_cache: block size {key_cache.shape[1]} must be a multiple of {BLOCK_SIZE_MULTIPLE}")
    if table.shape[0] != batch:
        raise ValueError(f"{table_name}: expected {batch} rows (one per sequence), got shape {tuple(table.shape)}")
    return table.shape[1] * key_cache.shape[1]


def _check_kv_lens(name: str, lens: torch.Tensor, capacity: int) -> None:
    # Only where reading the lengths costs no device sync; on devices the bound is the caller's.
    # One aminmax instead of two compares, an and, an all (16 -> 5 us per call; every layer, every step).
    if _is_real_cpu(lens) and lens.numel():
        low, high = (int(v) for v in torch.aminmax(lens))
        if low < 0 or high > capacity:
            raise ValueError(f"{name}: every length must be in [0, {capacity}] (block table capacity), "
                             f"got max {high}")


def _check_scalars(scale: float, softcap: float) -> None:
    check_positive("scale", scale)
    if softcap < 0:
        raise ValueError(f"softcap: must be >= 0 (0 = off), got {softcap}")


def _validate_unified(out, query, key_cache, value_cache, block_table, cu_seqlens_q, seqused_k, max_seqlen_q: int,
                      max_seqlen_k: int, scale: float, softcap: float, sliding_window: int) -> None:
    _check_query_out(query, out, "query")
    check_tensor("cu_seqlens_q", cu_seqlens_q, dtypes=(torch.int32,), ndim=1, contiguous=True)
    check_tensor("seqused_k", seqused_k, dtypes=(torch.int32,), ndim=1, contiguous=True)
    batch = seqused_k.shape[0]
    capacity = _check_paged(query, key_cache, value_cache, "block_table", block_table, batch)
    check_same_device(query=query, out=out, key_cache=key_cache, value_cache=value_cache, block_table=block_table,
                      cu_seqlens_q=cu_seqlens_q, seqused_k=seqused_k)
    check_same_dtype(query=query, key_cache=key_cache, value_cache=value_cache, out=out)
    check_shape("cu_seqlens_q", cu_seqlens_q, (batch + 1,), "num_seqs + 1, num_seqs from seqused_k")
    if not 0 <= max_seqlen_q <= query.shape[0]:
        raise ValueError(f"max_seqlen_q: must be in [0, {query.shape[0]}] (the query's tokens), got {max_seqlen_q}")
    if not 0 <= max_seqlen_k <= capacity:
        raise ValueError(f"max_seqlen_k: must be in [0, {capacity}] (block_table capacity), got {max_seqlen_k}")
    _check_kv_lens("seqused_k", seqused_k, capacity)
    _check_scalars(scale, softcap)


def _validate_paged(out, query, key_cache, value_cache, block_tables, seq_lens, scale: float, softcap: float,
                    sliding_window: int) -> None:
    _check_query_out(query, out, "query")
    check_tensor("seq_lens", seq_lens, dtypes=(torch.int32,), ndim=1, contiguous=True)
    check_shape("seq_lens", seq_lens, (query.shape[0],), "one per query token (decode)")
    capacity = _check_paged(query, key_cache, value_cache, "block_tables", block_tables, query.shape[0])
    check_same_device(query=query, out=out, key_cache=key_cache, value_cache=value_cache, block_tables=block_tables,
                      seq_lens=seq_lens)
    check_same_dtype(query=query, key_cache=key_cache, value_cache=value_cache, out=out)
    _check_kv_lens("seq_lens", seq_lens, capacity)
    _check_scalars(scale, softcap)


def _validate_varlen(out, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q: int, max_seqlen_k: int, scale: float,
                     causal: bool) -> None:
    _check_query_out(q, out, "q")
    check_tensor("k", k, dtypes=FLOAT_DTYPES, ndim=3)
    check_tensor("v", v, dtypes=FLOAT_DTYPES, ndim=3)
    check_tensor("cu_seqlens_q", cu_seqlens_q, dtypes=(torch.int32,), ndim=1, contiguous=True)
    check_tensor("cu_seqlens_k", cu_seqlens_k, dtypes=(torch.int32,), ndim=1, contiguous=True)
    check_same_device(q=q, out=out, k=k, v=v, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k)
    check_same_dtype(q=q, k=k, v=v, out=out)
    check_shape("v", v, k.shape, "same as k")
    _check_heads("k", k, q, k.shape[1])
    if cu_seqlens_q.shape[0] == 0:
        raise ValueError("cu_seqlens_q: needs at least one entry (num_seqs + 1)")
    check_shape("cu_seqlens_k", cu_seqlens_k, cu_seqlens_q.shape, "same as cu_seqlens_q")
    if not 0 <= max_seqlen_q <= q.shape[0]:
        raise ValueError(f"max_seqlen_q: must be in [0, {q.shape[0]}] (q's tokens), got {max_seqlen_q}")
    if not 0 <= max_seqlen_k <= k.shape[0]:
        raise ValueError(f"max_seqlen_k: must be in [0, {k.shape[0]}] (k's tokens), got {max_seqlen_k}")
    check_positive("scale", scale)


unified_attention_op = register_op(
    "unified_attention",
    "(Tensor! out, Tensor query, Tensor key_cache, Tensor value_cache, Tensor block_table, Tensor cu_seqlens_q, "
    "Tensor seqused_k, int max_seqlen_q, int max_seqlen_k, float scale, float softcap, int sliding_window) -> ()",
    validate=_validate_unified,
    reference=reference.unified_attention,
    triton="ascendkit.kernels.attention_unified:unified_attention",
)

paged_attention_op = register_op(
    "paged_attention",
    "(Tensor! out, Tensor query, Tensor key_cache, Tensor value_cache, Tensor block_tables, Tensor seq_lens, "
    "float scale, float softcap, int sliding_window) -> ()",
    validate=_validate_paged,
    reference=reference.paged_attention,
    triton="ascendkit.kernels.attention_paged:paged_attention",
)

flash_attention_varlen_op = register_op(
    "flash_attention_varlen",
    "(Tensor! out, Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, Tensor cu_seqlens_k, int max_seqlen_q, "
    "int max_seqlen_k, float scale, bool causal) -> ()",
    validate=_validate_varlen,
    reference=reference.flash_attention_varlen,
    triton="ascendkit.kernels.attention_varlen:flash_attention_varlen",
)


def unified_attention(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                      block_table: torch.Tensor, cu_seqlens_q: torch.Tensor, seqused_k: torch.Tensor,
                      max_seqlen_q: int, max_seqlen_k: int, scale: float, softcap: float = 0.0,
                      sliding_window: int = 0) -> torch.Tensor:
    """Mixed prefill/decode attention over the paged cache. query [T, H, D] (fp16/bf16/fp32),
    caches [num_blocks, block_size, KVH, D] (same dtype, H % KVH == 0), block_table [B, max_blocks]
    int32 (-1 padded), cu_seqlens_q [B+1] int32, seqused_k [B] int32 (context + new tokens; the
    new tokens are the last, causal bottom-right). max_seqlen_q/k are host ints bounding the
    batch (no device sync). Returns out [T, H, D] in query's dtype."""
    out = torch.empty(query.shape, dtype=query.dtype, device=query.device)
    unified_attention_op(out, query, key_cache, value_cache, block_table, cu_seqlens_q, seqused_k, max_seqlen_q,
                         max_seqlen_k, scale, softcap, sliding_window)
    return out


def paged_attention(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                    block_tables: torch.Tensor, seq_lens: torch.Tensor, scale: float, softcap: float = 0.0,
                    sliding_window: int = 0) -> torch.Tensor:
    """Decode attention: one query token per sequence, query [B, H, D], at position seq_lens[b] - 1
    of sequence b (seq_lens [B] int32 includes it). Caches and block_tables as in
    unified_attention. Returns out [B, H, D] in query's dtype."""
    out = torch.empty(query.shape, dtype=query.dtype, device=query.device)
    paged_attention_op(out, query, key_cache, value_cache, block_tables, seq_lens, scale, softcap, sliding_window)
    return out


def flash_attention_varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                           cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int, scale: float,
                           causal: bool = True) -> torch.Tensor:
    """Dense varlen attention: q [Tq, H, D], k/v [Tk, KVH, D] (same dtype, H % KVH == 0), sequences
    laid end to end with cu_seqlens_q/k [B+1] int32 prefix sums; causal is bottom-right aligned
    (query i of a sequence sees keys j <= kv_len - q_len + i). Returns out [Tq, H, D]."""
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    flash_attention_varlen_op(out, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale, causal)
    return out
