"""How the sampling references read non-finite logits (the rules are ascendtile/ops/sampling.py's
docstring): a NaN counts as -inf, and a row holding +inf puts all of its mass on its +inf tokens,
in equal shares (the limit of the softmax as those logits grow together); every other token of
such a row has probability 0.
"""
from __future__ import annotations

import torch

NEG_INF, POS_INF = float("-inf"), float("inf")


def settle(y: torch.Tensor, infinite_as: float) -> torch.Tensor:
    """A copy of rows y [r, ...] (fp32) with NaN as -inf and, in each row holding +inf, its +inf
    tokens as `infinite_as` and every other token as -inf: 0 gives the draw and the logprobs
    finite logits with the rules' distribution, +inf keeps the tokens as process_logits found them."""
    y = torch.where(y.isnan(), NEG_INF, y)
    infinite = y == POS_INF
    holds = infinite.flatten(1).any(-1).view(-1, *[1] * (y.dim() - 1))
    return torch.where(holds, torch.where(infinite, infinite_as, NEG_INF), y)
