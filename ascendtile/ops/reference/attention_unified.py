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


def unified_attention_decode_traceable(out: torch.Tensor, query: torch.Tensor, key_cache: torch.Tensor,
                                       value_cache: torch.Tensor, block_table: torch.Tensor, cu_seqlens_q: torch.Tensor,
                                       seqused_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int, scale: float,
                                       softcap: float, sliding_window: int, kv_cache_dtype: str = "auto",
                                       k_scale: torch.Tensor | None = None, v_scale: torch.Tensor | None = None) -> None:
    """unified_attention of a decode batch (every sequence brings one new token, so query row b is
    sequence b and cu_seqlens_q is not read) over float caches, for a traced graph
    (compilation/decompose.py): no host read and no shape that depends on values, so Inductor
    compiles it with the rest of the step. Keys are gathered up to max_seqlen_k (a SymInt in the
    graph) for every sequence; a key is visible where the eager path shows it (j < kv_len, its block
    id in [0, num_blocks), inside the window), hidden keys are zeroed before the products (unused
    slots may hold NaN) and a query with no visible key gets 0. Scores and values go through one
    bmm per KV head: a reshape or einsum that merges the batch with the heads makes the trace (or
    Inductor's view lowering) guard on the batch size."""
    if kv_cache_dtype != "auto":
        raise ValueError(f"kv_cache_dtype: the traceable decode attention reads float caches ('auto'), "
                         f"got {kv_cache_dtype!r}")
    batch, heads, dim = query.shape
    torch._check(block_table.shape[0] == batch)
    torch._check(seqused_k.shape[0] == batch)
    num_blocks, block_size, kv_heads = key_cache.shape[:3]
    group, blocks = heads // kv_heads, (max_seqlen_k + block_size - 1) // block_size
    num_k = blocks * block_size
    ids = block_table[:, :blocks].long()
    key_pos = torch.arange(num_k, device=query.device)
    key_block = key_pos // block_size  # the block-table column of each key position
    kv_len = seqused_k.long()[:, None]
    visible = (key_pos < kv_len) & ((ids >= 0) & (ids < num_blocks))[:, key_block]  # [B, num_k]
    if sliding_window > 0:
        visible &= key_pos > kv_len - 1 - sliding_window
    # [B, num_k] flat cache rows, read by one 2-D index: no reshape of a gathered [B * blocks, ...]
    slots = ids.clamp(0, num_blocks - 1)[:, key_block] * block_size + key_pos % block_size

    def gathered(cache: torch.Tensor) -> torch.Tensor:
        return torch.where(visible[..., None, None], cache.view(-1, kv_heads, dim)[slots].float(), 0.0)

    keys, values = gathered(key_cache), gathered(value_cache)  # [B, num_k, KVH, D]
    q = query.float().view(batch, kv_heads, group, dim)
    hidden = ~visible[:, None, :]
    heads_out = []
    for h in range(kv_heads):  # one bmm per KV head: merging the batch with the heads would guard on it
        scores = torch.bmm(q[:, h], keys[:, :, h].transpose(1, 2)) * scale  # [B, group, num_k]
        if softcap > 0:
            scores = softcap * torch.tanh(scores / softcap)
        probs = torch.softmax(scores.masked_fill(hidden, float("-inf")), dim=-1).nan_to_num(0.0)
        heads_out.append(torch.bmm(probs, values[:, :, h]))
    out.copy_(torch.stack(heads_out, 1).view(batch, heads, dim))
