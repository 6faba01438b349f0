"""Reference: absorbed MLA attention over the paged latent cache.

Vectorised over the batch: the visible cache rows of every sequence are gathered into a padded
[B, max_seqlen_k, L+R] tensor and the new tokens into [B, max_seqlen_q, H, L+R]; one masked
softmax in fp32 covers all sequences. Memory is B·H·max_seqlen_q·max_seqlen_k fp32 scores.
"""
from __future__ import annotations

import torch


def mla_attention(out: torch.Tensor, query: torch.Tensor, kv_cache: torch.Tensor, block_table: torch.Tensor,
                  cu_seqlens_q: torch.Tensor, seqused_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int,
                  kv_lora_rank: int, scale: float) -> None:
    num_tokens, batch = query.shape[0], seqused_k.shape[0]
    if num_tokens == 0:
        return
    if batch == 0 or max_seqlen_q == 0 or max_seqlen_k == 0:
        out.zero_()
        return
    device = query.device
    block_size = kv_cache.shape[1]
    blocks = min(-(-max_seqlen_k // block_size), block_table.shape[1])
    # Padding entries of the block table are -1: clamp them to block 0 and mask the rows below.
    ids = block_table[:, :blocks].long().clamp(min=0)
    kv = kv_cache[ids].reshape(batch, blocks * block_size, -1)[:, :max_seqlen_k].float()
    kv_len = seqused_k.long()
    key_pos = torch.arange(max_seqlen_k, device=device)
    kv = kv.masked_fill((key_pos[None, :] >= kv_len[:, None])[..., None], 0.0)  # unused slots may hold NaN

    starts = cu_seqlens_q[:-1].long()
    q_len = cu_seqlens_q[1:].long() - starts
    q_pos = torch.arange(max_seqlen_q, device=device)
    q_valid = q_pos[None, :] < q_len[:, None]  # [B, Q]
    rows = (starts[:, None] + q_pos[None, :]).clamp(max=num_tokens - 1)
    q = query[rows].float()  # [B, Q, H, D]

    scores = torch.einsum("bqhd,bkd->bhqk", q, kv) * scale
    # Bottom-right causal: new token i of a sequence is at position kv_len - q_len + i.
    last_visible = (kv_len - q_len)[:, None] + q_pos[None, :]  # [B, Q]
    visible = key_pos[None, None, :] <= last_visible[..., None]  # [B, Q, K]; also implies < kv_len
    scores = scores.masked_fill(~visible[:, None], float("-inf"))
    probs = torch.softmax(scores, dim=-1).nan_to_num_(0.0)  # rows with no visible key -> 0
    o = torch.einsum("bhqk,bkl->bqhl", probs, kv[..., :kv_lora_rank])  # [B, Q, H, L]
    out.zero_()
    out[rows[q_valid]] = o[q_valid].to(out.dtype)
