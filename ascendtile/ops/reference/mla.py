"""Reference: absorbed MLA attention over the paged latent cache.

Vectorised: the new tokens are laid out as [B, max_seqlen_q, H, L+R] and each sequence's visible
cache rows gathered into [B, max_seqlen_k, L+R]; one masked fp32 softmax covers the batch. When
that padding would more than double the work (a long prefill chunk beside decodes), it runs per
sequence instead, each padded only to its own length. An int8 cache's gathered rows are
dequantized to fp32 with their gathered scales (ops/_kv_quant.py); the rest of the cache is not.
"""
from __future__ import annotations

import torch

from ascendtile.ops.reference._kv_quant import block_scales


def _gather_kv(kv_cache: torch.Tensor, block_table: torch.Tensor, kv_len: torch.Tensor, max_k: int, lora: int,
               kv_scale: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """([B, max_k, L+R] fp32 cache rows of each sequence, key_ok [B, max_k]): rows at or past
    kv_len or in a block whose id is outside [0, num_blocks) are 0 and not ok. kv_scale: an int8
    cache's scale cache [num_blocks, 2, block_size] or static scale (None: a float cache)."""
    num_blocks, block_size = kv_cache.shape[:2]
    blocks = min(-(-max_k // block_size), block_table.shape[1])
    # Padding entries of the block table are -1, and a bad id may be anything: clamp them into range
    # and zero their rows below.
    ids = block_table[:, :blocks].long()
    safe = ids.clamp(0, num_blocks - 1)
    block_ok = safe == ids
    kv = kv_cache[safe].reshape(ids.shape[0], blocks * block_size, -1)[:, :max_k].float()
    if kv_scale is not None and kv_scale.dim() == 3:
        scales = block_scales(kv_scale, safe, max_k)  # [B, max_k, 2]: the latent, the rope part
        kv[..., :lora] *= scales[..., :1]
        kv[..., lora:] *= scales[..., 1:]
    elif kv_scale is not None:
        kv *= kv_scale.reshape(())
    key_ok = block_ok.repeat_interleave(block_size, 1)[:, :max_k]
    key_ok &= torch.arange(max_k, device=kv.device)[None, :] < kv_len[:, None]
    return kv.masked_fill(~key_ok[..., None], 0.0), key_ok  # unused slots may hold NaN


def _attend(q: torch.Tensor, kv: torch.Tensor, key_ok: torch.Tensor, q_len: torch.Tensor, kv_len: torch.Tensor,
            lora: int, scale: float) -> torch.Tensor:
    """q [B, Q, H, L+R] and kv [B, K, L+R] fp32 (key_ok [B, K]) -> [B, Q, H, L]; new token i of a
    sequence sits at position kv_len - q_len + i (bottom-right causal)."""
    scores = torch.einsum("bqhd,bkd->bhqk", q, kv) * scale
    q_pos = torch.arange(q.shape[1], device=q.device)
    last_visible = (kv_len - q_len)[:, None] + q_pos[None, :]  # [B, Q]
    visible = torch.arange(kv.shape[1], device=q.device)[None, None, :] <= last_visible[..., None]  # implies < kv_len
    visible &= key_ok[:, None, :]
    scores = scores.masked_fill(~visible[:, None], float("-inf"))
    probs = torch.softmax(scores, dim=-1).nan_to_num_(0.0)  # rows with no visible key -> 0
    return torch.einsum("bhqk,bkl->bqhl", probs, kv[..., :lora])


def mla_attention(out: torch.Tensor, query: torch.Tensor, kv_cache: torch.Tensor, block_table: torch.Tensor,
                  cu_seqlens_q: torch.Tensor, seqused_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int,
                  kv_lora_rank: int, scale: float, kv_cache_dtype: str = "auto",
                  kv_scale: torch.Tensor | None = None) -> None:
    num_tokens, batch = query.shape[0], seqused_k.shape[0]
    kv_scale = kv_scale if kv_cache_dtype == "int8" else None
    out.zero_()
    if num_tokens == 0 or batch == 0 or max_seqlen_q == 0 or max_seqlen_k == 0:
        return
    kv_len = seqused_k.long()
    starts = cu_seqlens_q[:-1].long()
    q_len = cu_seqlens_q[1:].long() - starts
    if batch * max_seqlen_q <= 2 * num_tokens:
        q_pos = torch.arange(max_seqlen_q, device=query.device)
        valid = q_pos[None, :] < q_len[:, None]  # [B, Q]
        rows = (starts[:, None] + q_pos[None, :]).clamp(max=num_tokens - 1)
        kv, key_ok = _gather_kv(kv_cache, block_table, kv_len, max_seqlen_k, kv_lora_rank, kv_scale)
        o = _attend(query[rows].float(), kv, key_ok, q_len, kv_len, kv_lora_rank, scale)
        out[rows[valid]] = o[valid].to(out.dtype)
        return
    bounds, kv_lens = cu_seqlens_q.tolist(), seqused_k.tolist()  # host values: this path is CPU only
    for b in range(batch):
        s, e = bounds[b], bounds[b + 1]
        if e > s and kv_lens[b] > 0:
            kv, key_ok = _gather_kv(kv_cache, block_table[b:b + 1], kv_len[b:b + 1], kv_lens[b], kv_lora_rank,
                                     kv_scale)
            o = _attend(query[s:e].float()[None], kv, key_ok, q_len[b:b + 1], kv_len[b:b + 1], kv_lora_rank, scale)
            out[s:e] = o[0].to(out.dtype)
