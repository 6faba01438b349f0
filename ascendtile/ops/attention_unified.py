"""Op: unified_attention (mixed prefill/decode over the paged KV cache; conventions in _attention.py)."""
from __future__ import annotations

import torch

from ascendtile.ops._attention import validate_unified
from ascendtile.ops._registry import register_op, unchecked


UNIFIED_ATTENTION_SCHEMA = ("(Tensor! out, Tensor query, Tensor key_cache, Tensor value_cache, Tensor block_table, "
                            "Tensor cu_seqlens_q, Tensor seqused_k, SymInt max_seqlen_q, SymInt max_seqlen_k, float scale, "
                            "float softcap, int sliding_window, str kv_cache_dtype=\"auto\", Tensor? k_scale=None, "
                            "Tensor? v_scale=None) -> ()")
unified_attention_op = register_op("unified_attention", UNIFIED_ATTENTION_SCHEMA, validate=validate_unified)
_unified_attention_unchecked = unchecked("unified_attention")


def unified_attention(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                      block_table: torch.Tensor, cu_seqlens_q: torch.Tensor, seqused_k: torch.Tensor,
                      max_seqlen_q: int, max_seqlen_k: int, scale: float, softcap: float = 0.0,
                      sliding_window: int = 0, kv_cache_dtype: str = "auto", k_scale: torch.Tensor | None = None,
                      v_scale: torch.Tensor | None = None, *, validate: bool = True) -> torch.Tensor:
    """Mixed prefill/decode attention over the paged cache. query [T, H, D] (fp16/bf16/fp32),
    caches [num_blocks, block_size, KVH, D] (same dtype, H % KVH == 0), block_table [B, max_blocks]
    int32 (-1 padded), cu_seqlens_q [B+1] int32, seqused_k [B] int32 (context + new tokens; the
    new tokens are the last, causal bottom-right). max_seqlen_q/k are host ints bounding the
    batch (no device sync). A block id outside [0, num_blocks) hides its keys (never read; with
    ASCENDTILE_CHECK_INDICES=1 it raises); a query with no visible key gets 0. kv_cache_dtype
    "int8": int8 caches (written by reshape_and_cache_flash with "int8") read with k_scale /
    v_scale, the scale caches fp32 [num_blocks, KVH, block_size] (dynamic) or static fp32 scales
    (one element or [KVH]), dequantized in the kernel (ops/_kv_quant.py). Returns out [T, H, D]
    in query's dtype.
    validate=False: no argument checks (`_registry.unchecked`: for callers valid by construction)."""
    out = torch.empty(query.shape, dtype=query.dtype, device=query.device)
    op = unified_attention_op if validate else _unified_attention_unchecked
    op(out, query, key_cache, value_cache, block_table, cu_seqlens_q, seqused_k, max_seqlen_q, max_seqlen_k, scale,
       softcap, sliding_window, kv_cache_dtype, k_scale, v_scale)
    return out
