"""Op: paged_attention (decode: one query token per sequence over the paged KV cache; conventions
in _attention.py)."""
from __future__ import annotations

import torch

from ascendtile.ops._attention import validate_paged
from ascendtile.ops._registry import register_op


PAGED_ATTENTION_SCHEMA = ("(Tensor! out, Tensor query, Tensor key_cache, Tensor value_cache, Tensor block_tables, "
                          "Tensor seq_lens, float scale, float softcap, int sliding_window, str kv_cache_dtype=\"auto\", "
                          "Tensor? k_scale=None, Tensor? v_scale=None) -> ()")
paged_attention_op = register_op("paged_attention", PAGED_ATTENTION_SCHEMA, validate=validate_paged)


def paged_attention(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                    block_tables: torch.Tensor, seq_lens: torch.Tensor, scale: float, softcap: float = 0.0,
                    sliding_window: int = 0, kv_cache_dtype: str = "auto", k_scale: torch.Tensor | None = None,
                    v_scale: torch.Tensor | None = None) -> torch.Tensor:
    """Decode attention: one query token per sequence, query [B, H, D], at position seq_lens[b] - 1
    of sequence b (seq_lens [B] int32 includes it). Caches and block_tables as in
    unified_attention (kv_cache_dtype "int8" with k_scale / v_scale too). Returns out [B, H, D] in
    query's dtype."""
    out = torch.empty(query.shape, dtype=query.dtype, device=query.device)
    paged_attention_op(out, query, key_cache, value_cache, block_tables, seq_lens, scale, softcap, sliding_window,
                       kv_cache_dtype, k_scale, v_scale)
    return out
