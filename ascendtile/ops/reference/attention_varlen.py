"""Reference: flash_attention_varlen (dense varlen, also the CPU path): keys gathered through
cu_seqlens_k, attended in at most two padded groups (see _attention.py)."""
from __future__ import annotations

import torch

from ascendtile.ops.reference._attention import run_groups, take_rows


def flash_attention_varlen(out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                           cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor, max_seqlen_q: int,
                           max_seqlen_k: int, scale: float, causal: bool) -> None:
    if q.shape[0] == 0 or cu_seqlens_q.shape[0] < 2:
        return
    if k.shape[0] == 0:  # no keys anywhere: every query sees nothing
        out.zero_()
        return
    q_start = cu_seqlens_q[:-1].long()
    q_len = cu_seqlens_q[1:].long() - q_start
    k_start = cu_seqlens_k[:-1].long()
    kv_len = cu_seqlens_k[1:].long() - k_start

    def gather(seqs: torch.Tensor, num_k: int):
        rows = (k_start.index_select(0, seqs)[:, None] + torch.arange(num_k, device=k.device)[None, :]).clamp(
            max=k.shape[0] - 1)
        return take_rows(k, rows), take_rows(v, rows), None

    run_groups(out, q, q_start, q_len, kv_len, gather, scale, 0.0, 0, causal)
