"""References (also the CPU path) of the sampling family. The filter rules and the tie rule are in
ascendkit/kernels/sampling.py's docstring and are the same here; the draw is not (see below).

Nothing sorts the vocabulary. With e = exp(y - max y) computed once per row, filter thresholds
come from the CANDIDATES largest logits (one torch.topk): the top-k threshold is the k-th
candidate, the top-p threshold the smallest candidate whose strictly-larger mass fits. Rows the
candidates cannot decide (top-k beyond them, a nucleus wider than them) find the exact threshold
by a radix select on e's bit pattern (one pass over the row, then only the tokens that matter).

Sampling is an inverse-CDF draw: one uniform per row, hashed from (seed, step), located in the
row's softmax taken in vocabulary order (chunk sums, then one chunk's prefix sums). Everything is
row-local, so a seeded row draws the same token whatever the batch. The Triton kernel draws by
Gumbel-max with per-token hashed noise instead (one pass, no prefix sums on device): both follow
the filtered distribution and each is reproducible on its own, but for the same seed the two
paths may pick different tokens.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

CANDIDATES = 128
RADIX_BITS = 10  # three levels cover the 30 bits of a fp32 in [0, 2)
CHUNK = 1024  # the draw's first level: chunk sums
_MASK32 = 0xFFFFFFFF
_MIX1, _MIX2, _STEP_SALT = 0x85EBCA6B, 0xC2B2AE35, 0x2545F491


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


def _uniforms(seeds: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
    """One uniform in (0, 1) per row from the top 24 bits of its key (fp64: exact)."""
    return ((row_keys(seeds, steps) >> 8).to(torch.float64) + 0.5) / (1 << 24)


def _weight_above(mass: torch.Tensor, carried: torch.Tensor) -> torch.Tensor:
    """Per bucket, carried + the weight in the buckets above it. A reversed prefix sum: exactly
    carried at the highest non-empty bucket whatever the rounding."""
    return carried + mass.flip(-1).cumsum(-1).flip(-1) - mass


def _lowest_fitting(mass: torch.Tensor, above: torch.Tensor, limit: torch.Tensor) -> torch.Tensor:
    """The lowest bucket with weight whose weight above still fits; the highest such bucket
    always fits (its weight above is what fitted one level up), so one exists."""
    ids = torch.arange(mass.shape[1], device=mass.device)
    return torch.where((above <= limit) & (mass > 0), ids, mass.shape[1]).amin(-1, keepdim=True)


def _radix_select(e: torch.Tensor, weight: torch.Tensor, limit: torch.Tensor) -> torch.Tensor:
    """The smallest value t of e (rows [n, vocab], fp32 >= 0) with sum{weight : e > t} <= limit
    ([n, 1]), as [n, 1]; weights are > 0 except on the smallest e (those below a top-k floor).
    Bit patterns of non-negative floats are ordered like the floats: three levels each histogram
    the next 10 bits of the tokens sharing the prefix found so far. Only the first reads whole
    rows; the others read the prefix's tokens, gathered once."""
    n, buckets = e.shape[0], 1 << RADIX_BITS
    bits = e.view(torch.int32)
    key = (bits >> (2 * RADIX_BITS)).long()
    mass = torch.zeros(n, buckets, device=e.device).scatter_add_(1, key, weight)
    above = _weight_above(mass, torch.zeros_like(limit))
    prefix = _lowest_fitting(mass, above, limit)
    carried = above.gather(1, prefix)
    rows, cols = (key == prefix).nonzero(as_tuple=True)
    bits, weight = bits[rows, cols], weight[rows, cols]
    for shift in (RADIX_BITS, 0):
        key = ((bits >> shift) & (buckets - 1)).long()
        mass = torch.zeros(n, buckets, device=e.device).index_put_((rows, key), weight, accumulate=True)
        above = _weight_above(mass, carried)
        bucket = _lowest_fitting(mass, above, limit)
        carried = above.gather(1, bucket)
        prefix = (prefix << RADIX_BITS) | bucket
        keep = key == bucket[rows, 0]
        rows, bits, weight = rows[keep], bits[keep], weight[keep]
    return prefix.int().view(torch.float32)


def _nucleus(cand: torch.Tensor, k_floor: torch.Tensor, limit: torch.Tensor, vocab: int):
    """(top-p threshold [n, 1], undecided [n, 1]) from the candidates' e, largest first."""
    width = cand.shape[1]
    in_k = cand >= k_floor
    cand = torch.where(in_k, cand, 0.0)
    # Mass strictly above each candidate: the exclusive prefix sum at the first of its tie group.
    exclusive = cand.cumsum(-1) - cand
    new_group = torch.ones_like(in_k)
    new_group[:, 1:] = cand[:, 1:] != cand[:, :-1]
    first = torch.where(new_group, torch.arange(width, device=cand.device), 0).cummax(-1).values
    fits = (exclusive.gather(1, first) <= limit) & in_k  # a prefix; the best token always fits
    threshold = cand.gather(1, fits.sum(-1, keepdim=True) - 1)
    return threshold, fits[:, -1:] & (width < vocab)  # the nucleus may go on past the candidates


def _drop_filtered(y: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor, min_p: torch.Tensor) -> None:
    """Sets -inf in y [n, vocab] (already divided by temperature) outside every filter ([n, 1])."""
    vocab = y.shape[1]
    cand_y, cand_ids = y.topk(min(CANDIDATES, vocab), dim=-1)
    e = (y - cand_y[:, :1]).exp_()
    cand = e.gather(1, cand_ids)
    k_on = (top_k > 0) & (top_k < vocab)
    k_floor = torch.where(k_on, cand.gather(1, (top_k - 1).clamp(0, cand.shape[1] - 1)), 0.0)
    wide = (k_on & (top_k > cand.shape[1]))[:, 0]
    if bool(wide.any()):
        k_floor[wide] = _radix_select(e[wide], torch.ones_like(e[wide]), (top_k[wide] - 1).float())
    floor = torch.maximum(k_floor, min_p)
    p_on = top_p < 1
    if bool(p_on.any()):
        # without top-k every token weighs its e: no masked copy of the rows
        weight = torch.where(e >= k_floor, e, 0.0) if bool(k_on.any()) else e
        limit = top_p * weight.sum(-1, keepdim=True)
        p_floor, undecided = _nucleus(cand, k_floor, limit, vocab)
        undecided = (undecided & p_on)[:, 0]
        if bool(undecided.all()):  # flat rows: no copies
            p_floor = _radix_select(e, weight, limit)
        elif bool(undecided.any()):
            p_floor[undecided] = _radix_select(e[undecided], weight[undecided], limit[undecided])
        floor = torch.maximum(floor, torch.where(p_on, p_floor, 0.0))
    y.masked_fill_(e < floor, float("-inf"))


def process_logits(logits: torch.Tensor, temperatures: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                   min_p: torch.Tensor) -> None:
    greedy = temperatures == 0
    scale = torch.where(greedy, 1.0, temperatures)
    if bool((scale != 1).any()):
        logits.div_(scale[:, None])
    top_k = torch.where(greedy, 0, top_k.long())
    top_p = torch.where(greedy, 1.0, top_p)
    min_p = torch.where(greedy, 0.0, min_p)
    rows = (((top_k > 0) & (top_k < logits.shape[1])) | (top_p < 1) | (min_p > 0)).nonzero()[:, 0]
    if rows.numel() == logits.shape[0]:
        _drop_filtered(logits, top_k[:, None], top_p[:, None], min_p[:, None])
    elif rows.numel():
        y = logits.index_select(0, rows)
        _drop_filtered(y, top_k[rows, None], top_p[rows, None], min_p[rows, None])
        logits.index_copy_(0, rows, y)


def _inverse_cdf(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """The token whose CDF interval (vocabulary order) holds u [n] fp64, per row of probs [n, vocab]:
    chunk sums locate the chunk, that chunk's prefix sums the token. Clamping keeps the pick on a
    token of positive probability whatever the rounding."""
    n, vocab = probs.shape
    chunks = F.pad(probs, (0, -vocab % CHUNK)).view(n, -1, CHUNK)
    sums = chunks.sum(-1)
    cum = sums.cumsum(-1)
    target = (u * cum[:, -1].double()).float()[:, None]
    last = torch.where(sums > 0, torch.arange(sums.shape[1], device=probs.device), 0).amax(-1, keepdim=True)
    chunk = torch.searchsorted(cum, target, right=True).clamp(max=last)
    within = chunks[torch.arange(n, device=probs.device), chunk[:, 0]]
    offset = (target - (cum - sums).gather(1, chunk)).clamp(min=0)  # >= 0: never a zero-probability token
    last = torch.where(within > 0, torch.arange(CHUNK, device=probs.device), 0).amax(-1, keepdim=True)
    token = torch.searchsorted(within.cumsum(-1), offset, right=True).clamp(max=last)
    return (chunk * CHUNK + token)[:, 0]


def sample_tokens(token_ids: torch.Tensor, logits: torch.Tensor, temperatures: torch.Tensor, seeds: torch.Tensor,
                  steps: torch.Tensor) -> None:
    noisy = temperatures != 0
    if bool(noisy.all()):
        token_ids.copy_(_inverse_cdf(torch.softmax(logits, -1), _uniforms(seeds, steps)))
        return
    token = logits.argmax(-1)  # first index of the max: ties go to the lowest id
    rows = noisy.nonzero()[:, 0]
    if rows.numel():
        probs = torch.softmax(logits.index_select(0, rows), -1)
        token[rows] = _inverse_cdf(probs, _uniforms(seeds[rows], steps[rows]))
    token_ids.copy_(token)


def apply_penalties(logits: torch.Tensor, output_counts: torch.Tensor, prompt_mask: torch.Tensor,
                    count_rows: torch.Tensor, repetition_penalties: torch.Tensor, frequency_penalties: torch.Tensor,
                    presence_penalties: torch.Tensor) -> None:
    # Every penalty leaves a token the row has not seen (in its prompt or output) as it is, and a
    # row sees few tokens: one pass over the penalised rows finds the seen (row, token) pairs, and
    # the formula runs on those alone.
    active = (count_rows >= 0).nonzero()[:, 0]
    if not active.numel():
        return
    slots = count_rows.index_select(0, active).long()
    seen = output_counts.index_select(0, slots) + prompt_mask.index_select(0, slots)  # > 0 where seen
    pair, cols = seen.nonzero(as_tuple=True)
    rows = active.index_select(0, pair)
    count = output_counts[slots.index_select(0, pair), cols].to(torch.float32)
    x = logits[rows, cols]
    rep = repetition_penalties.index_select(0, rows)
    x = torch.where(x > 0, x / rep, x * rep)
    present = (count > 0).to(torch.float32)
    x = x - frequency_penalties.index_select(0, rows) * count - presence_penalties.index_select(0, rows) * present
    logits[rows, cols] = x


def update_token_counts(output_counts: torch.Tensor, count_rows: torch.Tensor, token_ids: torch.Tensor) -> None:
    active = count_rows >= 0
    flat = output_counts.view(-1)  # contiguous: checked by the op
    index = count_rows.clamp(min=0).long() * output_counts.stride(0) + token_ids.long()
    flat.index_add_(0, index, active.to(output_counts.dtype))


def _top_by_rule(lp: torch.Tensor, n_top: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The n_top largest of each row of lp with the tie rule, as (values, ids) ordered by
    (value desc, id asc). topk leaves open which of several tokens tied at the n-th value it
    returns: take every token above the n-th value, then the lowest ids equal to it."""
    boundary = lp.topk(n_top, dim=-1).values[:, -1:]
    above = lp > boundary
    tied = (lp == boundary) & ((lp == boundary).cumsum(-1) <= n_top - above.sum(-1, keepdim=True))
    picked = (above | tied).nonzero()[:, 1].view(-1, n_top)
    return _by_value_then_id(lp.gather(1, picked), picked)


def _by_value_then_id(values: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    by_id = ids.sort(dim=-1).indices
    values, ids = values.gather(1, by_id), ids.gather(1, by_id)
    order = values.sort(dim=-1, descending=True, stable=True).indices
    return values.gather(1, order), ids.gather(1, order)


def gather_logprobs(logprobs: torch.Tensor, logprob_ids: torch.Tensor, logits: torch.Tensor, rows: torch.Tensor,
                    token_ids: torch.Tensor) -> None:
    n_top = logprobs.shape[1] - 1
    lp = torch.log_softmax(logits.index_select(0, rows.long()), dim=-1)
    chosen = token_ids.index_select(0, rows.long()).long()[:, None]
    logprobs[:, :1] = lp.gather(1, chosen)
    logprob_ids[:, :1] = chosen
    if n_top == 0:
        return
    # One value past the n-th shows the rows where topk's choice among tied tokens could matter
    # (the n-th and the next are equal): only those take the rule's full-row passes.
    top, ids = lp.topk(min(n_top + 1, lp.shape[1]), dim=-1)
    values, ids = _by_value_then_id(top[:, :n_top], ids[:, :n_top])
    if top.shape[1] > n_top:
        ambiguous = (top[:, n_top] == top[:, n_top - 1]).nonzero()[:, 0]
        if ambiguous.numel():
            values[ambiguous], ids[ambiguous] = _top_by_rule(lp.index_select(0, ambiguous), n_top)
    logprobs[:, 1:] = values
    logprob_ids[:, 1:] = ids
