"""Op: flash_attention_varlen (dense varlen prefill; conventions in _attention.py)."""
from __future__ import annotations

import torch

from ascendtile.ops._attention import check_heads, check_query_out, check_scalars
from ascendtile.ops._registry import register_op
from ascendtile.ops._validate import FLOAT_DTYPES, INT32, check_same_device, check_same_dtype, check_shape, check_tensor


def _validate(out, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q: int, max_seqlen_k: int, scale: float,
              causal: bool) -> None:
    check_query_out(q, out, "q")
    check_tensor("k", k, dtypes=FLOAT_DTYPES, ndim=3)
    check_tensor("v", v, dtypes=FLOAT_DTYPES, ndim=3)
    check_tensor("cu_seqlens_q", cu_seqlens_q, dtypes=INT32, ndim=1, contiguous=True)
    check_tensor("cu_seqlens_k", cu_seqlens_k, dtypes=INT32, ndim=1, contiguous=True)
    check_same_device(q=q, out=out, k=k, v=v, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k)
    check_same_dtype(q=q, k=k, v=v, out=out)
    check_shape("v", v, k.shape, "same as k")
    check_heads("k", k, q, k.shape[1])
    if cu_seqlens_q.shape[0] == 0:
        raise ValueError("cu_seqlens_q: needs at least one entry (num_seqs + 1)")
    check_shape("cu_seqlens_k", cu_seqlens_k, cu_seqlens_q.shape, "same as cu_seqlens_q")
    if not 0 <= max_seqlen_q <= q.shape[0]:
        raise ValueError(f"max_seqlen_q: must be in [0, {q.shape[0]}] (q's tokens), got {max_seqlen_q}")
    if not 0 <= max_seqlen_k <= k.shape[0]:
        raise ValueError(f"max_seqlen_k: must be in [0, {k.shape[0]}] (k's tokens), got {max_seqlen_k}")
    check_scalars(scale)


FLASH_ATTENTION_VARLEN_SCHEMA = ("(Tensor! out, Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, "
                                 "Tensor cu_seqlens_k, int max_seqlen_q, int max_seqlen_k, float scale, "
                                 "bool causal) -> ()")
flash_attention_varlen_op = register_op("flash_attention_varlen", FLASH_ATTENTION_VARLEN_SCHEMA, validate=_validate)


def flash_attention_varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                           cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int, scale: float,
                           causal: bool = True) -> torch.Tensor:
    """Dense varlen attention: q [Tq, H, D], k/v [Tk, KVH, D] (same dtype, H % KVH == 0), sequences
    laid end to end with cu_seqlens_q/k [B+1] int32 prefix sums; causal is bottom-right aligned
    (query i of a sequence sees keys j <= kv_len - q_len + i). Returns out [Tq, H, D]."""
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    flash_attention_varlen_op(out, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale, causal)
    return out
