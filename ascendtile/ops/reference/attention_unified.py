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
        ids, block_ok = block_ids(block_table.index_select(0, seqs), key_cache.shape[0], key_cache.shape[1], num_k,
                                  kv_len.index_select(0, seqs))
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
    compiles it with the rest of the step (where the CPU kernel, ascendtile/cpu/decode_attention.py,
    does not serve the call or cannot be built: the decode graph takes that kernel first). Keys are
    gathered up to max_seqlen_k (a SymInt in the graph) for every sequence; a key is visible where
    the eager path shows it (j < kv_len, its block id in [0, num_blocks), inside the window), hidden
    keys are zeroed before the products (unused slots may hold NaN) and a query with no visible key
    gets 0.

    The scores are a product summed over the head dim, which Inductor fuses with the gather: each
    key row is read from the cache in its own dtype and widened in registers, with no gathered fp32
    copy of the keys in memory. The values' product is fused the same way for 16-bit caches. For an
    fp32 cache it is one bmm over values gathered into [B · KVH, keys, D] (contiguous views that
    need no guard on the batch size): there Inductor (torch 2.13) vectorises the fused sum along
    the keys, loading 16 gathered rows per vector, ~6x slower at batch 32. One layer, SmolLM2
    heads, 192 keys, compiled alone, µs (2026-11-27, AMD EPYC with avx512_bf16;
    bench/results/2026-11-27-fused-decode-attention.md):
    bf16 batch 1: 64 -> 44, batch 32: 573 -> 490; fp32 batch 1: 64 -> 53, batch 32: 739 -> 539,
    against two bmm over gathered fp32 rows."""
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
    # [B, KVH, num_k] rows of the cache viewed as [slots · KVH, D], read by one index
    slots = ids.clamp(0, num_blocks - 1)[:, key_block] * block_size + key_pos % block_size
    rows = slots[:, None, :] * kv_heads + torch.arange(kv_heads, device=query.device)[:, None]

    def gathered(cache: torch.Tensor) -> torch.Tensor:  # [B, KVH, num_k, D] fp32
        return torch.where(visible[:, None, :, None], cache.view(-1, dim)[rows].float(), 0.0)

    q = query.float().view(batch, kv_heads, group, 1, dim)
    scores = (q * gathered(key_cache)[:, :, None]).sum(-1) * scale  # [B, KVH, G, num_k]
    if softcap > 0:
        scores = softcap * torch.tanh(scores / softcap)
    probs = torch.softmax(scores.masked_fill(~visible[:, None, None, :], float("-inf")), dim=-1).nan_to_num(0.0)
    values = gathered(value_cache)
    if value_cache.dtype == torch.float32:
        o = torch.bmm(probs.view(batch * kv_heads, group, num_k), values.view(batch * kv_heads, num_k, dim))
    else:
        o = (probs[..., None] * values[:, :, None]).sum(-2)  # [B, KVH, G, D]
    out.copy_(o.view(batch, heads, dim))
