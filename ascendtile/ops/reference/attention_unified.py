"""Reference: unified_attention (also the CPU path): a decode step in one pass, a batch of a few new
tokens per sequence through the same shared gather plan, any other batch in at most two padded
groups (see _attention.py)."""
from __future__ import annotations

import torch

from ascendtile.ops.reference._attention import block_ids, decode, gather_paged, run_groups, short_queries

# A batch whose every sequence brings 1 to this many new tokens (speculative decoding's verify
# steps: the newest token and its drafts) attends through the decode step's shared gather plan.
SHORT_QUERIES = 16


def unified_attention(out: torch.Tensor, query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                      block_table: torch.Tensor, cu_seqlens_q: torch.Tensor, seqused_k: torch.Tensor,
                      max_seqlen_q: int, max_seqlen_k: int, scale: float, softcap: float, sliding_window: int,
                      kv_cache_dtype: str = "auto", k_scale: torch.Tensor | None = None,
                      v_scale: torch.Tensor | None = None) -> None:
    if query.shape[0] == 0 or seqused_k.shape[0] == 0:
        return
    scales = (k_scale, v_scale) if kv_cache_dtype == "int8" else (None, None)
    q_start = cu_seqlens_q[:-1].long()
    q_len = cu_seqlens_q[1:].long() - q_start
    if query.shape[0] == seqused_k.shape[0] and bool((q_len == 1).all()):
        decode(out, query, key_cache, value_cache, block_table, seqused_k.long(), scale, softcap, sliding_window,
               *scales)
        return
    kv_len = seqused_k.long()
    if (softcap <= 0 and max_seqlen_q <= SHORT_QUERIES and bool((q_len >= 1).all())
            and short_queries(out, query, key_cache, value_cache, block_table, q_start, q_len, kv_len, scale,
                              sliding_window, *scales)):
        return

    def gather(seqs: torch.Tensor, num_k: int):
        ids, block_ok = block_ids(block_table[seqs], key_cache.shape[0], key_cache.shape[1], num_k, kv_len[seqs])
        return gather_paged(key_cache, ids, num_k, scales[0]), gather_paged(value_cache, ids, num_k, scales[1]), block_ok

    run_groups(out, query, q_start, q_len, kv_len, gather, scale, softcap, sliding_window, True)
