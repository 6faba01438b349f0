"""References (also the CPU path) of the sampling family; the rules are in
ascendkit/kernels/sampling.py's docstring and are the same here.

Nothing sorts the vocabulary. Filter thresholds come from a bounded candidate set, the CANDIDATES
largest e per row (torch.topk): the top-k threshold is the k-th candidate, the top-p threshold
the smallest candidate whose strictly-larger mass fits. Rows the candidates cannot decide (top-k
beyond them, or a nucleus wider than them) retry with WIDE candidates, then fall back to the
kernels' exact bisection on the threshold's bits, vectorized over those rows. Sampling draws the same hash-based Gumbel noise as
the kernels (kernels/_rng.py), only at the candidates when every kept token is among them.
"""
from __future__ import annotations

import torch

CANDIDATES = 128
WIDE = 4096  # the second candidate set, for wide nuclei and large k
THRESHOLD_BITS = 30
_MASK32 = 0xFFFFFFFF
_MIX1, _MIX2, _GOLDEN, _STEP_SALT = 0x85EBCA6B, 0xC2B2AE35, 0x9E3779B1, 0x2545F491


def _fmix32(h: torch.Tensor) -> torch.Tensor:
    """murmur3's finaliser on int64 tensors holding 32-bit values (kernels/_rng.py on int32)."""
    h = h ^ (h >> 16)
    h = (h * _MIX1) & _MASK32
    h = h ^ (h >> 13)
    h = (h * _MIX2) & _MASK32
    return h ^ (h >> 16)


def row_keys(seeds: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
    """Per-row 32-bit keys from int64 seeds and steps, as kernels/_rng.row_key."""
    lo, hi = seeds & _MASK32, (seeds >> 32) & _MASK32
    return _fmix32(lo ^ _fmix32(hi ^ _fmix32((steps & _MASK32) ^ _STEP_SALT)))


def gumbel(keys: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """Gumbel noise at vocab positions cols (int64, broadcast against keys [rows, 1])."""
    h = _fmix32(((cols * _GOLDEN) & _MASK32) ^ keys)
    u = ((h >> 9).to(torch.float32) + 0.5) * (1.0 / 8388608.0)
    return -torch.log(-torch.log(u))


def _mass_above(e: torch.Tensor, t: torch.Tensor, floor: torch.Tensor, count: bool) -> torch.Tensor:
    chosen = (e > t) & (e >= floor)
    return chosen.sum(-1, dtype=torch.float32) if count else torch.where(chosen, e, 0.0).sum(-1)


def _bisect(e: torch.Tensor, floor: torch.Tensor, limit: torch.Tensor, count: bool) -> torch.Tensor:
    """The smallest t >= 0 with _mass_above(t) <= limit, per row ([rows, 1] fp32)."""
    lo = torch.full_like(limit, -1, dtype=torch.int32)
    hi = torch.full_like(limit, (1 << THRESHOLD_BITS) - 1, dtype=torch.int32)
    for _ in range(THRESHOLD_BITS):
        mid = lo + (hi - lo) // 2
        fits = _mass_above(e, mid.view(torch.float32), floor, count)[:, None] <= limit
        hi, lo = torch.where(fits, mid, hi), torch.where(fits, lo, mid)
    return hi.view(torch.float32)


def _floors(e: torch.Tensor, cand: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor):
    """(threshold [rows, 1], undecided [rows]) from the sorted candidates cand [rows, width]."""
    vocab, width = e.shape[1], cand.shape[1]
    on = (top_k > 0) & (top_k < vocab)
    floor = torch.where(on, cand.gather(1, (top_k - 1).clamp(0, width - 1)), 0.0)
    undecided = (on & (top_k > width))[:, 0]
    limit = top_p * torch.where(e >= floor, e, 0.0).sum(-1, keepdim=True)
    in_k = cand >= floor
    cand = torch.where(in_k, cand, 0.0)
    # Mass strictly above each candidate: the exclusive prefix sum at the first of its tie group.
    exclusive = cand.cumsum(-1) - cand
    new_group = torch.ones_like(in_k)
    new_group[:, 1:] = cand[:, 1:] != cand[:, :-1]
    first = torch.where(new_group, torch.arange(width, device=e.device), 0).cummax(-1).values
    fits = (exclusive.gather(1, first) <= limit) & in_k
    last = fits.sum(-1, keepdim=True) - 1  # fits is a prefix: the last kept candidate
    threshold = torch.where(top_p < 1, cand.gather(1, last.clamp(min=0)), floor)
    undecided |= ((top_p < 1) & fits[:, -1:] & (width < vocab))[:, 0]
    return torch.maximum(threshold, floor), undecided


def _filter_floor(e: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Rows the candidates leave undecided retry with WIDE candidates, then bisect."""
    floor, undecided = _floors(e, e.topk(min(CANDIDATES, e.shape[1]), dim=-1).values, top_k, top_p)
    if bool(undecided.any()):
        rows = e[undecided]
        floor[undecided], still = _floors(rows, rows.topk(min(WIDE, e.shape[1]), dim=-1).values,
                                          top_k[undecided], top_p[undecided])
        undecided[undecided.clone()] = still
    if bool(undecided.any()):
        rows, k, p = e[undecided], top_k[undecided], top_p[undecided]
        on = (k > 0) & (k < e.shape[1])
        k_floor = torch.where(on, _bisect(rows, torch.zeros_like(p), (k - 1).to(torch.float32), count=True), 0.0)
        limit = p * torch.where(rows >= k_floor, rows, 0.0).sum(-1, keepdim=True)
        p_floor = torch.where(p < 1, _bisect(rows, k_floor, limit, count=False), 0.0)
        floor[undecided] = torch.maximum(k_floor, p_floor)
    return floor


def process_logits(logits: torch.Tensor, temperatures: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                   min_p: torch.Tensor) -> None:
    greedy = temperatures[:, None] == 0
    logits.div_(torch.where(greedy, 1.0, temperatures[:, None]))
    top_k = torch.where(greedy, 0, top_k[:, None].long())
    top_p = torch.where(greedy, 1.0, top_p[:, None])
    floor = torch.where(greedy, 0.0, min_p[:, None])
    filtered = (top_k > 0) | (top_p < 1)
    if not bool(filtered.any()) and not bool((floor > 0).any()):
        return
    e = torch.exp(logits - logits.amax(-1, keepdim=True))
    if bool(filtered.any()):
        floor = torch.maximum(floor, _filter_floor(e, top_k, top_p))
    logits.masked_fill_(e < floor, float("-inf"))


def sample_tokens(token_ids: torch.Tensor, logits: torch.Tensor, temperatures: torch.Tensor, seeds: torch.Tensor,
                  steps: torch.Tensor) -> None:
    keys = row_keys(seeds, steps)[:, None]
    noisy = (temperatures != 0)[:, None]
    # Candidates: as many as the widest row keeps (one counting pass), if that is well below the
    # vocabulary; unfiltered rows then draw over the whole row below.
    kept = (logits > float("-inf")).sum(-1)
    width = min(max(CANDIDATES, int(kept.max())), WIDE, logits.shape[1])
    values, ids = logits.topk(width, dim=-1)
    ids, order = ids.sort(-1)  # ascending ids: argmax's first-index rule is then the lowest id
    values = values.gather(1, order)
    scores = torch.where(noisy, values + gumbel(keys, ids), values)
    token = ids.gather(1, scores.argmax(-1, keepdim=True))[:, 0]
    # Rows keeping more tokens than the candidates (unfiltered and greedy rows among them) draw
    # over the whole vocabulary.
    partial = kept > width
    if bool(partial.any()):
        rows = logits[partial]
        cols = torch.arange(logits.shape[1], device=logits.device)
        full = torch.where(noisy[partial], rows + gumbel(keys[partial], cols), rows)
        token[partial] = full.argmax(-1)
    token_ids.copy_(token)


def apply_penalties(logits: torch.Tensor, output_counts: torch.Tensor, prompt_mask: torch.Tensor,
                    count_rows: torch.Tensor, repetition_penalties: torch.Tensor, frequency_penalties: torch.Tensor,
                    presence_penalties: torch.Tensor) -> None:
    active = count_rows >= 0
    rows = count_rows.clamp(min=0).long()
    count = output_counts.index_select(0, rows).to(torch.float32)
    seen = (count + prompt_mask.index_select(0, rows).to(torch.float32)) > 0
    rep = repetition_penalties[:, None]
    x = torch.where(seen, torch.where(logits > 0, logits / rep, logits * rep), logits)
    x = x - frequency_penalties[:, None] * count - presence_penalties[:, None] * (count > 0).to(torch.float32)
    logits.copy_(torch.where(active[:, None], x, logits))


def update_token_counts(output_counts: torch.Tensor, count_rows: torch.Tensor, token_ids: torch.Tensor) -> None:
    active = count_rows >= 0
    flat = output_counts.view(-1)  # contiguous: checked by the op
    index = count_rows.clamp(min=0).long() * output_counts.stride(0) + token_ids.long()
    flat.index_add_(0, index, active.to(output_counts.dtype))


def gather_logprobs(logprobs: torch.Tensor, logprob_ids: torch.Tensor, logits: torch.Tensor, rows: torch.Tensor,
                    token_ids: torch.Tensor) -> None:
    n_top = logprobs.shape[1] - 1
    lp = torch.log_softmax(logits.index_select(0, rows.long()), dim=-1)
    chosen = token_ids.index_select(0, rows.long()).long()[:, None]
    logprobs[:, :1] = lp.gather(1, chosen)
    logprob_ids[:, :1] = chosen
    if n_top == 0:
        return
    # topk leaves open which of several tokens tied at the n-th value it returns: take every token
    # above the n-th value, then the lowest ids equal to it, ordered by (value desc, id asc).
    boundary = lp.topk(n_top, dim=-1).values[:, -1:]
    above = lp > boundary
    tied = (lp == boundary) & ((lp == boundary).cumsum(-1) <= n_top - above.sum(-1, keepdim=True))
    picked = (above | tied).nonzero()[:, 1].view(-1, n_top)
    values = lp.gather(1, picked)
    order = values.sort(dim=-1, descending=True, stable=True).indices
    logprobs[:, 1:] = values.gather(1, order)
    logprob_ids[:, 1:] = picked.gather(1, order)
