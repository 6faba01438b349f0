"""References (also the CPU path) of the sampling family. The filter rules and the tie rule are in
ascendtile/kernels/sampling.py's docstring and are the same here; the draw is not.

Filtering (_sampling_filter.py) finds each threshold from a row's largest logits and rewrites a
row from them when they hold every kept token; a radix select (_sampling_select.py) finds the
thresholds they cannot decide. Sampling (_sampling_draw.py) is an inverse-CDF draw: one uniform
per row, hashed from (seed, step), located in the row's softmax taken in vocabulary order. The
Triton kernel draws by Gumbel-max with per-token hashed noise instead (one pass, no prefix sums
on device): both follow the filtered distribution and each is reproducible on its own, but for
the same seed the two paths may pick different tokens. Non-finite logits and tiny temperatures
follow ascendtile/ops/sampling.py's rules (_sampling_nonfinite.py).
"""
from __future__ import annotations

import torch

from ascendtile.ops.reference._sampling_draw import argmax, chunked, draw, settled, uniforms
from ascendtile.ops.reference._sampling_filter import drop_filtered
from ascendtile.ops.reference._sampling_nonfinite import NEG_INF, settle

SAMPLING_EPS = 1e-5  # vLLM's: a temperature below it is greedy (kernels/sampling.py holds the same)


def process_logits(logits: torch.Tensor, temperatures: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                   min_p: torch.Tensor) -> None:
    greedy = temperatures < SAMPLING_EPS
    scale = torch.where(greedy, 1.0, temperatures)
    if bool((scale != 1).any()):
        logits.div_(scale[:, None])
    top_k = torch.where(greedy, 0, top_k.long())
    top_p = torch.where(greedy, 1.0, top_p)
    min_p = torch.where(greedy, 0.0, min_p)
    rows = (((top_k > 0) & (top_k < logits.shape[1])) | (top_p < 1) | (min_p > 0)).nonzero()[:, 0]
    if rows.numel() == logits.shape[0]:
        drop_filtered(logits, top_k[:, None], top_p[:, None], min_p[:, None])
    elif rows.numel():
        y = logits.index_select(0, rows)
        drop_filtered(y, top_k[rows, None], top_p[rows, None], min_p[rows, None])
        logits.index_copy_(0, rows, y)


def sample_tokens(token_ids: torch.Tensor, logits: torch.Tensor, temperatures: torch.Tensor, seeds: torch.Tensor,
                  steps: torch.Tensor) -> None:
    chunks, maxima = settled(*chunked(logits))
    noisy = temperatures >= SAMPLING_EPS
    if bool(noisy.all()):
        token = draw(chunks, maxima, uniforms(seeds, steps))
    else:
        token = argmax(chunks, maxima)
        rows = noisy.nonzero()[:, 0]
        if rows.numel():
            token[rows] = draw(chunks[rows], maxima[rows], uniforms(seeds[rows], steps[rows]))
    token_ids.copy_(token)


GROUP = 64  # tokens per group of the seen-token scan


def _seen(output_counts: torch.Tensor, prompt_mask: torch.Tensor,
          slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The (i, token) pairs (int64 [p] each, by i then token) with output_counts[slots[i], token]
    (int32 >= 0) or prompt_mask[slots[i], token] (int8 0/1) nonzero."""
    table, vocab = output_counts.shape
    if vocab % GROUP or prompt_mask.storage_offset() % 8:
        seen = (output_counts.index_select(0, slots) != 0) | (prompt_mask.index_select(0, slots) != 0)
        return seen.nonzero(as_tuple=True)
    # nonzero is a scalar scan (~3 ms over [32, 49152]); a max per group (vectorised; the mask
    # read as int64, 8 tokens each) finds the few groups holding a seen token, and only those
    # are scanned
    counts, masks = output_counts.view(-1, GROUP), prompt_mask.view(-1, GROUP)
    any_mask = prompt_mask.view(torch.int64).view(table, -1, GROUP // 8).amax(-1) > 0
    live = ((counts.amax(-1).view(table, -1) > 0) | any_mask).index_select(0, slots)
    pair, group = live.nonzero(as_tuple=True)
    at = slots.index_select(0, pair) * live.shape[1] + group
    hit, offset = ((counts.index_select(0, at) != 0) | (masks.index_select(0, at) != 0)).nonzero(as_tuple=True)
    return pair.index_select(0, hit), group.index_select(0, hit) * GROUP + offset


def apply_penalties(logits: torch.Tensor, output_counts: torch.Tensor, prompt_mask: torch.Tensor,
                    count_rows: torch.Tensor, repetition_penalties: torch.Tensor, frequency_penalties: torch.Tensor,
                    presence_penalties: torch.Tensor) -> None:
    # Every penalty leaves a token the row has not seen (in its prompt or output) as it is, and a
    # row sees few tokens: find the seen (row, token) pairs, and run the formula on those alone.
    active = (count_rows >= 0).nonzero()[:, 0]
    if not active.numel():
        return
    slots = count_rows.index_select(0, active).long()
    pair, cols = _seen(output_counts, prompt_mask, slots)
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
    x = logits.index_select(0, rows.long())
    odd = (~torch.isfinite(x.amax(-1))).nonzero()[:, 0]  # a NaN, +inf, or no finite logit
    if odd.numel():
        x.index_copy_(0, odd, settle(x.index_select(0, odd), 0.0))
    lp = torch.log_softmax(x, dim=-1)
    if odd.numel():  # a row of -inf has no distribution: every logprob -inf, not log_softmax's NaN
        lp.masked_fill_(lp.isnan(), NEG_INF)
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
