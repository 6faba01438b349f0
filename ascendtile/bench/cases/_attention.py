"""Shared by the attention families' cases (attention_paged, attention_varlen, attention_unified):
the paged cache with its block table (float, or int8 with dynamic scale caches, ops/_kv_quant.py),
the compulsory traffic and the causal (query, key) pairs."""
from __future__ import annotations

import torch

from ascendtile.bench.cases import CACHE_BLOCK_SIZE, element_size

# An int8 cache's dynamic scales: one fp32 per (token, KV head), for K and for V.
INT8_SCALE_BYTES = 4


def paged(batch_lens: list[int], kv_heads: int, head_dim: int, dtype: torch.dtype, device: torch.device):
    """Caches holding each sequence's keys in its own shuffled blocks, and the block table."""
    per_seq = [-(-n // CACHE_BLOCK_SIZE) for n in batch_lens]
    width = max(per_seq)
    shape = (sum(per_seq), CACHE_BLOCK_SIZE, kv_heads, head_dim)
    key_cache = torch.randn(shape, dtype=dtype, device=device)
    value_cache = torch.randn(shape, dtype=dtype, device=device)
    return key_cache, value_cache, _table(per_seq, width, device)


def paged_int8(batch_lens: list[int], kv_heads: int, head_dim: int, device: torch.device):
    """(int8 key cache, value cache, block table, k_scale, v_scale): random int8 values and dynamic
    scale caches [num_blocks, kv_heads, block_size] for the same layout as paged()."""
    per_seq = [-(-n // CACHE_BLOCK_SIZE) for n in batch_lens]
    blocks = sum(per_seq)
    shape = (blocks, CACHE_BLOCK_SIZE, kv_heads, head_dim)
    caches = [torch.randint(-127, 128, shape, dtype=torch.int8, device=device) for _ in range(2)]
    scales = [torch.rand(blocks, kv_heads, CACHE_BLOCK_SIZE, device=device) / 64 for _ in range(2)]
    return caches[0], caches[1], _table(per_seq, max(per_seq), device), scales[0], scales[1]


def _table(per_seq: list[int], width: int, device: torch.device) -> torch.Tensor:
    """A -1 padded block table giving each sequence its own shuffled blocks."""
    ids = torch.randperm(sum(per_seq), device=device).to(torch.int32)
    table = torch.full((len(per_seq), width), -1, dtype=torch.int32, device=device)
    start = 0
    for row, count in enumerate(per_seq):
        table[row, :count] = ids[start:start + count]
        start += count
    return table


def io_bytes(q_tokens: int, kv_tokens: int, heads: int, kv_heads: int, head_dim: int, dtype: torch.dtype,
             kv_int8: bool = False) -> int:
    """Read queries, every visible key and value once (an int8 cache: one byte per value plus its
    K and V scales per token and KV head), write outputs."""
    queries = 2 * q_tokens * heads * head_dim * element_size(dtype)
    if kv_int8:
        return queries + 2 * kv_tokens * kv_heads * (head_dim + INT8_SCALE_BYTES)
    return queries + 2 * kv_tokens * kv_heads * head_dim * element_size(dtype)


def causal_pairs(q_len: int, kv_len: int) -> int:
    """(query, key) pairs a bottom-right aligned causal mask lets through."""
    return q_len * kv_len - q_len * (q_len - 1) // 2
