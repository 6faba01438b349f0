"""Shared by the attention families' cases (attention_paged, attention_varlen, attention_unified):
the paged cache with its block table, the compulsory traffic and the causal (query, key) pairs."""
from __future__ import annotations

import torch

from ascendtile.bench.cases import CACHE_BLOCK_SIZE, element_size


def paged(batch_lens: list[int], kv_heads: int, head_dim: int, dtype: torch.dtype, device: torch.device):
    """Caches holding each sequence's keys in its own shuffled blocks, and the block table."""
    per_seq = [-(-n // CACHE_BLOCK_SIZE) for n in batch_lens]
    width = max(per_seq)
    shape = (sum(per_seq), CACHE_BLOCK_SIZE, kv_heads, head_dim)
    key_cache = torch.randn(shape, dtype=dtype, device=device)
    value_cache = torch.randn(shape, dtype=dtype, device=device)
    ids = torch.randperm(sum(per_seq), device=device).to(torch.int32)
    table = torch.full((len(batch_lens), width), -1, dtype=torch.int32, device=device)
    start = 0
    for row, count in enumerate(per_seq):
        table[row, :count] = ids[start:start + count]
        start += count
    return key_cache, value_cache, table


def io_bytes(q_tokens: int, kv_tokens: int, heads: int, kv_heads: int, head_dim: int, dtype: torch.dtype) -> int:
    # read queries, every visible key and value once, write outputs
    return (2 * q_tokens * heads + 2 * kv_tokens * kv_heads) * head_dim * element_size(dtype)


def causal_pairs(q_len: int, kv_len: int) -> int:
    """(query, key) pairs a bottom-right aligned causal mask lets through."""
    return q_len * kv_len - q_len * (q_len - 1) // 2
