"""Input checks shared by the attention families (attention_unified, attention_paged,
attention_varlen) and mla: query/out, head layouts, the paged caches and the paged batch.

Cache layout [num_blocks, block_size, num_kv_heads, head_size] (mla: [num_blocks, block_size,
L+R]); block tables int32 [B, max_blocks] with -1 padding that is never read. Visibility of key j
to the query at absolute position p: j < kv_len, its block id in [0, num_blocks) (an id outside,
-1 included, hides its keys instead of reading outside the cache), causal j <= p (new tokens are
the last q_len of the kv_len: bottom-right aligned), sliding_window w > 0: p - w < j (HF/vLLM: the
query and the w - 1 keys before it). softcap c > 0: scores = c·tanh(scores / c). A query with no
visible key (e.g. seqused_k == 0, or every block id invalid) gets 0.

kv_cache_dtype "int8" (ops/_kv_quant.py): int8 caches read with k_scale / v_scale, each a dynamic
scale cache [num_blocks, num_kv_heads, block_size] or a static scale (one element or
[num_kv_heads]); with "auto" (float caches of the query's dtype) both are None.
"""
from __future__ import annotations

import torch

from ascendtile.ops._indices import check_block_table, check_lengths, check_slots
from ascendtile.ops._kv_quant import check_attention_scales, check_cache_dtype, check_kv_cache_dtype
from ascendtile.ops._validate import (
    FLOAT_DTYPES, INDEX_DTYPES, INT32, check_positive, check_same_device, check_same_dtype, check_shape, check_tensor,
)

# Kernels read a cache block as 16-row tiles (the smallest tl.dot operand) and keep a head of up to
# 256 dims on chip.
BLOCK_SIZE_MULTIPLE = 16
MAX_HEAD_SIZE = 256


def check_query_out(query: torch.Tensor, out: torch.Tensor, qname: str) -> None:
    check_tensor(qname, query, dtypes=FLOAT_DTYPES, ndim=3)
    check_tensor("out", out, dtypes=FLOAT_DTYPES, ndim=3)
    check_shape("out", out, query.shape, f"same as {qname}")
    if not 0 < query.shape[2] <= MAX_HEAD_SIZE:
        raise ValueError(f"{qname}: head size {query.shape[2]} must be in [1, {MAX_HEAD_SIZE}]")


def check_heads(kv_name: str, kv: torch.Tensor, query: torch.Tensor, kv_heads: int) -> None:
    if kv.shape[-1] != query.shape[2]:
        raise ValueError(f"{kv_name}: head size {kv.shape[-1]} differs from the query's {query.shape[2]}")
    if kv_heads == 0 or query.shape[1] % kv_heads:
        raise ValueError(f"{kv_name}: num_kv_heads {kv_heads} must divide the query's num_heads {query.shape[1]}")


def check_block_size(name: str, cache: torch.Tensor) -> int:
    if cache.shape[1] % BLOCK_SIZE_MULTIPLE:
        raise ValueError(f"{name}: block size {cache.shape[1]} must be a multiple of {BLOCK_SIZE_MULTIPLE}")
    return cache.shape[1]


def check_paged_batch(table_name: str, table: torch.Tensor, num_blocks: int, block_size: int, lens_name: str,
                      lens: torch.Tensor, num_tokens: int, cu_seqlens_q: torch.Tensor | None = None,
                      max_seqlen_q: int | None = None, max_seqlen_k: int | None = None) -> None:
    """The batch a paged op reads: `lens` [B] int32 KV lengths (the new tokens included) and
    `table` [B, max_blocks] int32 block ids. With cu_seqlens_q [B+1] int32 a mixed batch (B from
    lens); without, a decode batch of one query token per sequence (B = num_tokens). The host ints
    max_seqlen_q / max_seqlen_k must fit the query tokens / the table's capacity; the lengths are
    range-checked against the capacity where reading them costs no device sync, and on every
    device with ASCENDTILE_CHECK_INDICES=1, which also range-checks the block ids read (kernels and
    references skip an id outside [0, num_blocks) anyway)."""
    check_tensor(lens_name, lens, dtypes=INT32, ndim=1, contiguous=True)
    if cu_seqlens_q is None:
        batch = num_tokens
        check_shape(lens_name, lens, (batch,), "one per query token (decode)")
    else:
        batch = lens.shape[0]
        check_tensor("cu_seqlens_q", cu_seqlens_q, dtypes=INT32, ndim=1, contiguous=True)
        check_shape("cu_seqlens_q", cu_seqlens_q, (batch + 1,), f"num_seqs + 1, num_seqs from {lens_name}")
    check_tensor(table_name, table, dtypes=INT32, ndim=2)
    if table.shape[0] != batch:
        raise ValueError(f"{table_name}: expected {batch} rows (one per sequence), got shape {tuple(table.shape)}")
    capacity = table.shape[1] * block_size
    if max_seqlen_q is not None and not 0 <= max_seqlen_q <= num_tokens:
        raise ValueError(f"max_seqlen_q: must be in [0, {num_tokens}] (the query's tokens), got {max_seqlen_q}")
    if max_seqlen_k is not None and not 0 <= max_seqlen_k <= capacity:
        raise ValueError(f"max_seqlen_k: must be in [0, {capacity}] ({table_name} capacity), got {max_seqlen_k}")
    check_lengths(lens_name, lens, capacity, table_name)
    check_block_table(table_name, table, num_blocks, block_size, lens)


def check_paged_step(positions: torch.Tensor, slot_mapping: torch.Tensor, block_tables: torch.Tensor,
                     cu_seqlens_q: torch.Tensor, seqused_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int,
                     block_size: int, num_blocks: int) -> None:
    """The checks rotary_embedding, reshape_and_cache_flash and unified_attention make of a step's
    batch description (T = positions' length) against a paged cache of num_blocks blocks of
    block_size, made once: a caller that passed them may run those ops unvalidated for the step (a
    model's layers; AttentionMetadata.validate). With ASCENDTILE_CHECK_INDICES=1 this includes the
    range checks of the slots and block ids."""
    check_tensor("positions", positions, dtypes=INDEX_DTYPES, ndim=1)
    num_tokens = positions.shape[0]
    check_tensor("slot_mapping", slot_mapping, dtypes=INDEX_DTYPES, ndim=1)
    if slot_mapping.shape[0] > num_tokens:
        raise ValueError(f"slot_mapping: {slot_mapping.shape[0]} slots for {num_tokens} tokens")
    check_slots("slot_mapping", slot_mapping, num_blocks, block_size)
    check_paged_batch("block_tables", block_tables, num_blocks, block_size, "seqused_k", seqused_k, num_tokens,
                      cu_seqlens_q, max_seqlen_q, max_seqlen_k)
    check_same_device(positions=positions, slot_mapping=slot_mapping, block_tables=block_tables,
                      cu_seqlens_q=cu_seqlens_q, seqused_k=seqused_k)


def validate_unified(out, query, key_cache, value_cache, block_table, cu_seqlens_q, seqused_k, max_seqlen_q: int,
                     max_seqlen_k: int, scale: float, softcap: float, sliding_window: int, kv_cache_dtype: str = "auto",
                     k_scale: torch.Tensor | None = None, v_scale: torch.Tensor | None = None) -> None:
    check_paged_attention(out, query, key_cache, value_cache, "block_table", block_table, "seqused_k", seqused_k,
                          scale, softcap, kv_cache_dtype, k_scale, v_scale, cu_seqlens_q, max_seqlen_q, max_seqlen_k)


def validate_paged(out, query, key_cache, value_cache, block_tables, seq_lens, scale: float, softcap: float,
                   sliding_window: int, kv_cache_dtype: str = "auto", k_scale: torch.Tensor | None = None,
                   v_scale: torch.Tensor | None = None) -> None:
    check_paged_attention(out, query, key_cache, value_cache, "block_tables", block_tables, "seq_lens", seq_lens,
                          scale, softcap, kv_cache_dtype, k_scale, v_scale)


def check_paged_attention(out: torch.Tensor, query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                          table_name: str, table: torch.Tensor, lens_name: str, lens: torch.Tensor, scale: float,
                          softcap: float, kv_cache_dtype: str, k_scale: torch.Tensor | None,
                          v_scale: torch.Tensor | None, cu_seqlens_q: torch.Tensor | None = None,
                          max_seqlen_q: int | None = None, max_seqlen_k: int | None = None) -> None:
    """Every check of unified_attention (a mixed batch: cu_seqlens_q, max_seqlen_q/k given) and
    paged_attention (a decode batch)."""
    int8 = check_kv_cache_dtype(kv_cache_dtype)
    check_query_out(query, out, "query")
    check_cache_dtype("key_cache", key_cache, int8, 4)
    check_cache_dtype("value_cache", value_cache, int8, 4)
    check_shape("value_cache", value_cache, key_cache.shape, "same as key_cache")
    check_heads("key_cache", key_cache, query, key_cache.shape[2])
    block_size = check_block_size("key_cache", key_cache)
    check_paged_batch(table_name, table, key_cache.shape[0], block_size, lens_name, lens, query.shape[0],
                      cu_seqlens_q, max_seqlen_q, max_seqlen_k)
    check_attention_scales(int8, {"k_scale": k_scale, "v_scale": v_scale}, key_cache.shape[0], key_cache.shape[2],
                           block_size, "num_kv_heads", key_cache.shape[2])
    check_same_device(query=query, out=out, key_cache=key_cache, value_cache=value_cache, **{table_name: table},
                      cu_seqlens_q=cu_seqlens_q, **{lens_name: lens}, k_scale=k_scale, v_scale=v_scale)
    # int8 caches hold the query dtype's values quantized
    check_same_dtype(query=query, out=out, **({} if int8 else {"key_cache": key_cache, "value_cache": value_cache}))
    check_scalars(scale, softcap)


def check_scalars(scale: float, softcap: float = 0.0) -> None:
    """The softmax scale (> 0) and the logit softcap (>= 0, 0 = off) of every attention op."""
    check_positive("scale", scale)
    if softcap < 0:
        raise ValueError(f"softcap: must be >= 0 (0 = off), got {softcap}")
