"""Exact filter thresholds for the sampling reference (process_logits' CPU path), on
e = exp(y - max y) in (0, 1]: the top-p threshold from the candidates (the largest logits,
sorted) when the nucleus ends inside them, and a radix select over whole rows when a threshold
lies past them. The rules and the tie rule are ascendtile/kernels/sampling.py's docstring's.
"""
from __future__ import annotations

import torch

RADIX_BITS = 10  # three levels cover the 30 bits of a fp32 in [0, 2)


def _weight_above(mass: torch.Tensor, carried: torch.Tensor) -> torch.Tensor:
    """Per bucket, carried + the weight in the buckets above it. A reversed prefix sum: exactly
    carried at the highest non-empty bucket whatever the rounding."""
    return carried + mass.flip(-1).cumsum(-1).flip(-1) - mass


def _lowest_fitting(mass: torch.Tensor, above: torch.Tensor, limit: torch.Tensor) -> torch.Tensor:
    """The lowest bucket with weight whose weight above still fits; the highest such bucket
    always fits (its weight above is what fitted one level up), so one exists."""
    ids = torch.arange(mass.shape[1], device=mass.device)
    return torch.where((above <= limit) & (mass > 0), ids, mass.shape[1]).amin(-1, keepdim=True)


def radix_select(e: torch.Tensor, weight: torch.Tensor, limit: torch.Tensor) -> torch.Tensor:
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


def nucleus(cand: torch.Tensor, k_floor: torch.Tensor, limit: torch.Tensor,
            vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(top-p threshold fp32 [n, 1], undecided bool [n, 1]) from the candidates' e (fp32 [n, w],
    largest first), the top-k floor and the mass limit ([n, 1]); undecided: the nucleus may go on
    past the candidates (the threshold is then the last candidate's, a lower bound)."""
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
