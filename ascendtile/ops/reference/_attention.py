"""Shared by the references of unified_attention, paged_attention and flash_attention_varlen
(also the CPU path).

One masked-softmax core works on a padded batch: query [B, Q, H, D] against keys/values gathered
into [B, S, KVH, D] (from the paged cache through the block table, or from the dense varlen
tensors through cu_seqlens_k), in fp32. Scores cost B·H·Q·S floats, so a mixed batch is split
into two padded groups, decode sequences (q_len 1) and the rest (prefill chunks), instead of
padding every decode row to the longest prefill chunk: at most two vectorised passes per call. A
group of one sequence (a single prompt's prefill) reads and writes its rows as slices, unpadded.
A group of prefills from scratch needs no mask: torch's fused attention runs with is_causal.
A decode batch (one query per sequence) skips the padded core: it gathers through the step's
DecodePlan (_decode_plan.py), built once and reused by every layer, and attends with torch's fused
attention (softcapped scores: one bmm per KV head). These run on CPU only (devices launch the kernels), so reading lengths to the host is cheap.

Visibility of key j (0-based position in the sequence) to the query at absolute position p:
j < kv_len and its block id in [0, num_blocks) (paged: an id outside hides the key, as in the
kernels); causal: j <= p (bottom-right aligned: the new tokens are the last q_len of the
kv_len, p = kv_len - q_len + i); sliding window w > 0: p - w < j (HF / vLLM: a query sees
itself and the w - 1 keys before it). A query with no visible key gets 0.

An int8 cache (kv_cache_dtype "int8") comes with its scales (k_scale / v_scale: a scale cache
[num_blocks, KVH, block_size] or a static scale, ops/_kv_quant.py; None for a float cache): only
the gathered rows are dequantized, to fp32, with the gathered scales (_kv_quant.py).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ascendtile.ops.reference._decode_plan import DecodeGroup, decode_plan
from ascendtile.ops.reference._kv_quant import block_scales, dequantize, static_scale


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_len: torch.Tensor, kv_len: torch.Tensor,
           scale: float, softcap: float, window: int, causal: bool,
           block_ok: torch.Tensor | None = None) -> torch.Tensor:
    """q [B, Q, H, D], k/v [B, S, KVH, D] freshly gathered (overwritten here; rows >= kv_len or
    not block_ok [B, S] may hold anything), lengths [B] -> [B, Q, H, D] fp32."""
    batch, num_q, heads, dim = q.shape
    num_k, kv_heads = k.shape[1], k.shape[2]
    key_pos = torch.arange(num_k, device=q.device)
    in_len = key_pos[None, :] < kv_len[:, None]  # [B, S]
    key_ok = in_len if block_ok is None else in_len & block_ok
    k, v = k.float(), v.float()
    if not bool(key_ok.all()):  # (a lone sequence's keys are all visible: nothing to zero)
        # Unused cache slots may hold NaN/inf (uninitialised memory): zero them so that masked keys
        # contribute exactly 0 (a 0 probability times NaN would still be NaN).
        k.masked_fill_(~key_ok[..., None, None], 0.0)
        v.masked_fill_(~key_ok[..., None, None], 0.0)
    # A fresh causal prefill (each sequence's queries are all its keys, every key's block valid, no
    # window shorter than the longest sequence): valid row i sees keys 0..i, as SDPA's is_causal
    # (top-left) shows them, so the fused kernel skips the hidden tiles and reads no mask (the
    # caller drops padded rows). SmolLM2-shaped heads, one 2,048-token prompt, 30 layers: 3.9 -> 2.0 s
    # (2 threads, AVX2 EPYC, 2026-11-27; bench/results/2026-11-27-causal-prefill.md).
    fresh = (softcap <= 0 and causal and bool((q_len == kv_len).all())
             and (window <= 0 or int(kv_len.max()) <= window)
             and (block_ok is None or bool(block_ok[in_len].all())))
    if fresh:
        o = F.scaled_dot_product_attention(q.float().transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           is_causal=True, scale=scale, enable_gqa=True)
        return o.transpose(1, 2)
    q_pos = (kv_len - q_len)[:, None] + torch.arange(num_q, device=q.device)[None, :]  # [B, Q]
    visible = key_ok[:, None, :].expand(batch, num_q, num_k)
    if causal:
        visible = visible & (key_pos[None, None, :] <= q_pos[..., None])
    if window > 0:
        visible = visible & (key_pos[None, None, :] > q_pos[..., None] - window)
    if softcap <= 0:
        # torch's fused CPU attention (GQA-aware): no [B, H, Q, S] probabilities materialised.
        o = F.scaled_dot_product_attention(q.float().transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           attn_mask=visible[:, None], scale=scale, enable_gqa=True)
        return o.transpose(1, 2).nan_to_num_(0.0)  # rows with no visible key -> 0
    qf = q.float().view(batch, num_q, kv_heads, heads // kv_heads, dim)
    scores = torch.einsum("bqkgd,bskd->bkgqs", qf, k) * scale
    scores = softcap * torch.tanh(scores / softcap)
    scores = scores.masked_fill_(~visible[:, None, None], float("-inf"))
    probs = torch.softmax(scores, dim=-1).nan_to_num_(0.0)  # all-masked rows -> 0
    return torch.einsum("bkgqs,bskd->bqkgd", probs, v).reshape(batch, num_q, heads, dim)


def block_ids(block_table: torch.Tensor, num_blocks: int, block_size: int, num_k: int,
              kv_len: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(ids [B, blocks] to gather, block_ok [B, num_k] or None). Table entries outside
    [0, num_blocks) (-1 padding, or a bad id) are clamped into range, so they read some block;
    block_ok marks the keys whose id was in range, to mask the others. None when every block a
    sequence reads (below its kv_len) is in range, the usual case: nothing more to mask. A clamp
    and one compare: int compares and repeat_interleave cost 5-25 us each at decode sizes."""
    blocks = -(-num_k // block_size)
    ids = block_table[:, :blocks]
    safe = ids.clamp(0, num_blocks - 1)
    bad = safe != ids
    read = torch.arange(blocks, device=ids.device)[None, :] * block_size < kv_len[:, None]
    if not bool((bad & read).any()):
        return safe, None
    return safe, (~bad).repeat_interleave(block_size, 1)[:, :num_k]


def take_rows(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """x [N, ...] at the rows of index (int32 or int64, any shape) -> [*index.shape, ...], a copy through
    index_select, not x[index]: aten::index opens a parallel region even for a few rows, which
    measured ~8 ms a call at 2 threads while another process held the second core (~15 us idle)."""
    return x.index_select(0, index.flatten()).view(*index.shape, *x.shape[1:])


def gather_paged(cache: torch.Tensor, ids: torch.Tensor, num_k: int, scale: torch.Tensor | None = None) -> torch.Tensor:
    """[B, num_k, KVH, D] rows of each sequence (a copy) through the ids of block_ids; an int8
    cache's rows dequantized to fp32 with `scale` (see the module doc), taken by take_rows."""
    rows = take_rows(cache, ids).flatten(1, 2)[:, :num_k]
    if scale is None:
        return rows
    return dequantize(rows, block_scales(scale, ids, num_k) if scale.dim() == 3 else static_scale(scale, cache.shape[2]))


def gather_group(group: DecodeGroup, cache: torch.Tensor, scale: torch.Tensor | None, name: str) -> torch.Tensor:
    """The group's [G, num_k, KVH, D] rows of cache in fp32 (an int8 cache's dequantized with scale)."""
    rows = group.gather(cache, name)
    if scale is None:
        return rows.float()
    return dequantize(rows, group.gather_scales(scale) if scale.dim() == 3 else static_scale(scale, cache.shape[2]))


def decode(out: torch.Tensor, query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
           block_table: torch.Tensor, seq_lens: torch.Tensor, scale: float, softcap: float, window: int,
           k_scale: torch.Tensor | None = None, v_scale: torch.Tensor | None = None) -> None:
    """Every sequence has exactly one new token, query row b = sequence b (the decode step): query
    [B, H, D], seq_lens [B] (any int dtype), out [B, H, D]. The gather index is the step's
    DecodePlan, shared by every layer (_decode_plan.py); a batch whose read block ids are not all
    in range takes the general masked path."""
    plan = decode_plan(block_table, seq_lens, key_cache.shape[0], key_cache.shape[1])
    if plan is None:
        kv_len = seq_lens.long()
        num_k = max(int(kv_len.max()), 1)
        ids, block_ok = block_ids(block_table, key_cache.shape[0], key_cache.shape[1], num_k, kv_len)
        k, v = gather_paged(key_cache, ids, num_k, k_scale), gather_paged(value_cache, ids, num_k, v_scale)
        out.copy_(attend(query[:, None], k, v, torch.ones_like(kv_len), kv_len, scale, softcap, window, True,
                         block_ok)[:, 0])
        return
    kv = (key_cache, value_cache, k_scale, v_scale)
    for group in plan.groups:
        if group.rows is None:
            out.copy_(_attend_group(query, group, kv, scale, softcap, window))
        else:
            o = _attend_group(query.index_select(0, group.rows), group, kv, scale, softcap, window)
            out.index_copy_(0, group.rows, o.to(out.dtype))


def short_queries(out: torch.Tensor, query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                  block_table: torch.Tensor, q_start: torch.Tensor, q_len: torch.Tensor, seq_lens: torch.Tensor,
                  scale: float, window: int, k_scale: torch.Tensor | None = None,
                  v_scale: torch.Tensor | None = None) -> bool:
    """Attention of a batch where every sequence brings a few new tokens (q_len [B] >= 1, their
    rows from q_start [B]; seq_lens [B] counts them), without softcap, through the step's DecodePlan:
    K/V gathered once per layer through the shared index, one fused SDPA call per group over the
    group's padded queries (QueryLayout). False when the plan cannot be built (a read block id out
    of range): the caller takes the general path."""
    plan = decode_plan(block_table, seq_lens, key_cache.shape[0], key_cache.shape[1])
    if plan is None:
        return False
    heads, dim = query.shape[1:]
    for group in plan.groups:
        starts, lens = (q_start, q_len) if group.rows is None else (q_start[group.rows], q_len[group.rows])
        layout = group.queries(starts, lens, window)
        q = query.index_select(0, layout.rows).view(group.num_seqs, layout.num_q, heads, dim)
        k, v = gather_group(group, key_cache, k_scale, "key"), gather_group(group, value_cache, v_scale, "value")
        o = F.scaled_dot_product_attention(q.float().transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           attn_mask=layout.bias, scale=scale, enable_gqa=True)
        o = o.transpose(1, 2).reshape(-1, heads, dim).index_select(0, layout.kept).nan_to_num_(0.0)  # no key -> 0
        out.index_copy_(0, layout.dest, o.to(out.dtype))
    return True


def _attend_group(query: torch.Tensor, group: DecodeGroup, kv: tuple, scale: float, softcap: float,
                  window: int) -> torch.Tensor:
    """query [G, H, D] of the group's sequences (one token each), kv = (key_cache, value_cache,
    k_scale, v_scale) -> [G, H, D] fp32."""
    key_cache, value_cache, k_scale, v_scale = kv
    batch, heads, dim = query.shape
    kv_heads = key_cache.shape[2]
    k, v = gather_group(group, key_cache, k_scale, "key"), gather_group(group, value_cache, v_scale, "value")
    if softcap <= 0:
        # torch's fused CPU attention over the gathered rows (GQA-aware, strided K/V views): one
        # call instead of the ~12 small ops below, ~30 µs less per layer at one sequence.
        o = F.scaled_dot_product_attention(query.float()[:, :, None], k.transpose(1, 2), v.transpose(1, 2),
                                           attn_mask=group.bias(window)[:, None], scale=scale, enable_gqa=True)
        return o[:, :, 0].nan_to_num_(0.0)  # no visible key -> 0
    q = query.float().unflatten(1, (kv_heads, heads // kv_heads))
    # Softcapped scores: one bmm per KV head against its strided [G, S, D] slice of the gathered
    # rows: GQA without expanding K/V to every query head, and no copy of K/V into a head-major layout.
    scores = torch.empty(kv_heads, batch, q.shape[2], group.num_k, device=q.device)
    for h in range(kv_heads):
        torch.bmm(q[:, h], k[:, :, h].transpose(1, 2), out=scores[h])
    scores.mul_(scale).div_(softcap).tanh_().mul_(softcap)
    probs = torch.softmax(scores.add_(group.bias(window)), dim=-1)
    o = torch.empty(kv_heads, batch, q.shape[2], dim, device=q.device)
    for h in range(kv_heads):
        torch.bmm(probs[h], v[:, :, h], out=o[h])
    return o.permute(1, 0, 2, 3).flatten(1, 2).nan_to_num_(0.0)  # no visible key -> 0


def run_groups(out: torch.Tensor, query: torch.Tensor, q_start: torch.Tensor, q_len: torch.Tensor,
                kv_len: torch.Tensor, gather_kv, scale: float, softcap: float, window: int, causal: bool) -> None:
    """Attend sequences in (at most) two padded groups and write their rows of out. gather_kv(seqs,
    num_k) -> (k, v, block_ok [B, num_k] or None)."""
    is_decode = q_len == 1
    heads, dim = query.shape[1:]
    for group in (is_decode, (q_len > 1)):
        seqs = group.nonzero().flatten()
        if seqs.numel() == 0:
            continue
        g_q, g_k = q_len.index_select(0, seqs), kv_len.index_select(0, seqs)
        num_q, num_k = int(g_q.max()), max(int(g_k.max()), 1)
        k, v, block_ok = gather_kv(seqs, num_k)
        if seqs.numel() == 1:
            # A lone sequence (a single prompt's prefill): its rows are a slice of query and of out,
            # with no row index; with its zeroing skipped in attend, a 128-token SmolLM2 bf16 layer
            # 729-737 against 864-891 µs (bench/results/2026-11-27-fused-decode-attention.md).
            start = int(q_start[seqs])
            rows = slice(start, start + num_q)
            o = attend(query[rows][None], k, v, g_q, g_k, scale, softcap, window, causal, block_ok)
            out[rows] = o[0]
            continue
        # index_select / index_copy_ rather than aten::index and index_put (see take_rows): a
        # 128-token SmolLM2 prefill layer 574-625 against 610-658 µs
        # (bench/results/2026-11-27-direct-decode.md)
        pos = torch.arange(num_q, device=query.device)
        valid = (pos[None, :] < g_q[:, None]).flatten().nonzero().flatten()  # kept rows of [B * Q]
        rows = (q_start.index_select(0, seqs)[:, None] + pos[None, :]).clamp(max=query.shape[0] - 1)
        o = attend(take_rows(query, rows), k, v, g_q, g_k, scale, softcap, window, causal, block_ok)
        o = o.reshape(-1, heads, dim)
        out.index_copy_(0, rows.flatten().index_select(0, valid), o.index_select(0, valid).to(out.dtype))
