"""Op: mla_attention (DeepSeek-V2 absorbed attention over the paged latent cache)."""
from __future__ import annotations

import torch

from ascendtile.ops._attention import check_block_size, check_paged_batch, check_scalars
from ascendtile.ops._kv_quant import MLA_SCALE_PARTS, check_attention_scales, check_cache_dtype, check_kv_cache_dtype
from ascendtile.ops._registry import register_op
from ascendtile.ops._validate import FLOAT_DTYPES, check_same_device, check_same_dtype, check_shape, check_tensor


def _validate(out: torch.Tensor, query: torch.Tensor, kv_cache: torch.Tensor, block_table: torch.Tensor,
              cu_seqlens_q: torch.Tensor, seqused_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int,
              kv_lora_rank: int, scale: float, kv_cache_dtype: str = "auto",
              kv_scale: torch.Tensor | None = None) -> None:
    int8 = check_kv_cache_dtype(kv_cache_dtype)
    check_tensor("query", query, dtypes=FLOAT_DTYPES, ndim=3)
    check_cache_dtype("kv_cache", kv_cache, int8, 3)
    check_tensor("out", out, dtypes=FLOAT_DTYPES, ndim=3)
    tokens, heads, dim = query.shape
    if kv_cache.shape[2] != dim:
        raise ValueError(f"kv_cache: last dim {kv_cache.shape[2]} differs from query's {dim} (kv_lora_rank + rope dim)")
    block_size = check_block_size("kv_cache", kv_cache)
    if not 0 < kv_lora_rank < dim:
        raise ValueError(f"kv_lora_rank: must be in (0, {dim}) so the rope part is not empty, got {kv_lora_rank}")
    check_shape("out", out, (tokens, heads, kv_lora_rank), "[tokens, heads, kv_lora_rank]")
    check_paged_batch("block_table", block_table, kv_cache.shape[0], block_size, "seqused_k", seqused_k, tokens,
                      cu_seqlens_q, max_seqlen_q, max_seqlen_k)
    check_attention_scales(int8, {"kv_scale": kv_scale}, kv_cache.shape[0], MLA_SCALE_PARTS, block_size,
                           "2 (latent, rope)", None)
    check_same_device(query=query, out=out, kv_cache=kv_cache, block_table=block_table,
                      cu_seqlens_q=cu_seqlens_q, seqused_k=seqused_k, kv_scale=kv_scale)
    check_same_dtype(query=query, out=out, **({} if int8 else {"kv_cache": kv_cache}))  # int8: quantized
    check_scalars(scale)


MLA_ATTENTION_SCHEMA = ("(Tensor! out, Tensor query, Tensor kv_cache, Tensor block_table, Tensor cu_seqlens_q, "
                        "Tensor seqused_k, SymInt max_seqlen_q, SymInt max_seqlen_k, int kv_lora_rank, float scale, "
                        "str kv_cache_dtype=\"auto\", Tensor? kv_scale=None) -> ()")
mla_attention_op = register_op("mla_attention", MLA_ATTENTION_SCHEMA, validate=_validate)


def mla_attention(query: torch.Tensor, kv_cache: torch.Tensor, block_table: torch.Tensor, cu_seqlens_q: torch.Tensor,
                  seqused_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int, kv_lora_rank: int,
                  scale: float, kv_cache_dtype: str = "auto", kv_scale: torch.Tensor | None = None) -> torch.Tensor:
    """Absorbed MLA over the paged latent cache. query [T, H, L+R] (q_nope·W_UK ++ roped q_pe),
    kv_cache [num_blocks, block_size, L+R] (one latent head; V = its first L columns), block_table
    [B, max_blocks] int32 (-1 padded), cu_seqlens_q [B+1] int32, seqused_k [B] int32 (context +
    new tokens; the new tokens are the last, causal bottom-right); max_seqlen_q / max_seqlen_k are
    host ints at least the longest new-token count / KV length (the CPU reference pads to them).
    A block id outside [0, num_blocks) hides its keys (never read; ASCENDTILE_CHECK_INDICES=1
    raises instead). kv_cache_dtype "int8": an int8 cache (written by concat_and_cache_mla with
    "int8") read with kv_scale, its scale cache fp32 [num_blocks, 2, block_size] (the latent and
    rope part of each token; dynamic) or one static fp32 scale, dequantized in the kernel
    (ops/_kv_quant.py). Returns out [T, H, L] in query's dtype (fp16/bf16/fp32); a query with no
    visible key gets 0."""
    out = torch.empty((*query.shape[:2], kv_lora_rank), dtype=query.dtype, device=query.device)
    mla_attention_op(out, query, kv_cache, block_table, cu_seqlens_q, seqused_k, max_seqlen_q, max_seqlen_k,
                     kv_lora_rank, scale, kv_cache_dtype, kv_scale)
    return out
