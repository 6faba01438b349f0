"""Dense varlen attention (prefill without a paged cache): q [Tq, H, D], k/v [Tk, KVH, D] with
sequences laid end to end. It is the unified attention kernel with PAGED=False: K/V tiles are
read at position-aligned rows of the sequence instead of through a block table."""
from __future__ import annotations

import torch

from ascendtile.kernels.attention_unified import launch


def flash_attention_varlen(out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                           cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor, max_seqlen_q: int,
                           max_seqlen_k: int, scale: float, causal: bool) -> None:
    # cu_seqlens_k doubles as the (unused) block-table argument.
    launch(out, q, k, v, cu_seqlens_k, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, scale, 0.0, 0,
           paged=False, causal=causal)
