"""top-k / top-p / min-p filtering of the sampling reference (process_logits' CPU path). The rules
and the tie rule are ascendtile/kernels/sampling.py's docstring's; e = exp(y - max y).

Nothing sorts the vocabulary. The CANDIDATES largest logits of a row (one torch.topk) decide
most thresholds: top-k's is its k-th candidate, min-p's is fixed, top-p's comes from the
candidates' prefix masses when the nucleus ends inside them. A row whose kept tokens are all
candidates (its final threshold lies above the last candidate's e) is rewritten from them alone:
filled with -inf, the kept candidates scattered back. e over whole rows (one exp pass) is
computed only where something needs it: top-p's total mass when top-k does not confine the row
to its candidates, the radix select (ascendtile/ops/reference/_sampling_select.py) where a
threshold lies past the candidates (top-k beyond them, a nucleus wider than them), and the
full-row mask of the rows whose kept tokens go past them.

Rows whose largest logit is not finite (topk ranks a NaN first) follow the rules for
non-finite logits (_filter_nonfinite): those rules leave every other row to the above.
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from ascendtile.ops.reference._sampling_nonfinite import NEG_INF, POS_INF, settle
from ascendtile.ops.reference._sampling_select import nucleus, radix_select

CANDIDATES = 128
SMALLEST = 2.0**-149  # the smallest positive fp32: no float lies strictly between -SMALLEST and 0


class _RowExp:
    """e = exp(y - max y) of whole rows (fp32 [n, vocab]), computed on the first call only."""

    def __init__(self, y: torch.Tensor, top: torch.Tensor) -> None:
        self.y, self.top, self.e = y, top, None

    def __call__(self) -> torch.Tensor:
        if self.e is None:
            self.e = (self.y - self.top).exp_()
        return self.e


def _top_k_floor(cand: torch.Tensor, top_k: torch.Tensor, vocab: int,
                 e: Callable[[], torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(top-k on, bool [n, 1]; its threshold on e, fp32 [n, 1], 0 where off)."""
    k_on = (top_k > 0) & (top_k < vocab)
    k_floor = torch.where(k_on, cand.gather(1, (top_k - 1).clamp(0, cand.shape[1] - 1)), 0.0)
    wide = (k_on & (top_k > cand.shape[1]))[:, 0]
    if bool(wide.any()):
        rows = e()[wide]
        k_floor[wide] = radix_select(rows, torch.ones_like(rows), (top_k[wide] - 1).float())
    return k_on, k_floor


def _top_p_floor(cand: torch.Tensor, k_on: torch.Tensor, k_floor: torch.Tensor, top_p: torch.Tensor,
                 vocab: int, e: Callable[[], torch.Tensor]) -> torch.Tensor:
    """top-p's threshold on e (fp32 [n, 1], 0 where off). Its mass limit is top_p times the
    top-k-kept mass: the candidates' where top-k keeps candidates only, the whole row's else
    (whichever way the threshold is then found, so both ways agree)."""
    p_on = top_p < 1
    k_inside = k_on & (k_floor > cand[:, -1:])
    mass = torch.where(cand >= k_floor, cand, 0.0).sum(-1, keepdim=True)
    weight = None
    if not bool((k_inside | ~p_on).all()):
        # without top-k every token weighs its e: no masked copy of the rows
        weight = torch.where(e() >= k_floor, e(), 0.0) if bool(k_on.any()) else e()
        mass = torch.where(k_inside, mass, weight.sum(-1, keepdim=True))
    limit = top_p * mass
    p_floor, undecided = nucleus(cand, k_floor, limit, vocab)
    # an undecided row has its last candidate kept by top-k, so it is not k_inside: weight is set
    undecided = (undecided & p_on)[:, 0]
    if bool(undecided.all()):  # flat rows: no copies
        p_floor = radix_select(e(), weight, limit)
    elif bool(undecided.any()):
        p_floor[undecided] = radix_select(e()[undecided], weight[undecided], limit[undecided])
    return torch.where(p_on, p_floor, 0.0)


def _drop_below(y: torch.Tensor, e: torch.Tensor, floor: torch.Tensor) -> torch.Tensor:
    """y (fp32 [r, vocab], in place) with -inf where e < floor ([r, 1]); e is consumed. A float
    difference is 0 only between equal floats, so e - floor, clamped to <= 0, is 0 exactly where
    e >= floor: threshold turns the rest to -inf and one add applies it. Vectorised float ops
    throughout: a bool compare and masked_fill_ run ~5x slower on CPU."""
    return y.add_(F.threshold_(e.sub_(floor).clamp_(max=0.0), -SMALLEST, NEG_INF))


def _write_kept(y: torch.Tensor, cand_y: torch.Tensor, cand_ids: torch.Tensor, cand: torch.Tensor,
                floor: torch.Tensor, e: Callable[[], torch.Tensor]) -> None:
    """-inf in y wherever e < floor: from the candidates in rows whose kept tokens are all
    candidates, by a full-row pass in the others."""
    inside = (floor > cand[:, -1:])[:, 0] | (cand.shape[1] == y.shape[1])
    if not bool(inside.any()):
        _drop_below(y, e(), floor)
        return
    masked = (~inside).nonzero()[:, 0]
    if masked.numel():  # masked first, from y and e as they are; their rows go back after the fill
        masked_rows = _drop_below(y.index_select(0, masked), e().index_select(0, masked), floor.index_select(0, masked))
    y.fill_(NEG_INF).scatter_(1, cand_ids, torch.where(cand >= floor, cand_y, NEG_INF))
    if masked.numel():
        y.index_copy_(0, masked, masked_rows)


def _filter_nonfinite(y: torch.Tensor, odd: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                      min_p: torch.Tensor) -> None:
    """drop_filtered when some rows (odd, bool [n]) hold a NaN or +inf or no finite logit: their
    NaN become -inf, and a row holding +inf keeps exactly its +inf tokens (the others have
    probability 0, and every filter keeps a tied best group); then the rows with a finite max
    are filtered as usual."""
    rows = odd.nonzero()[:, 0]
    fixed = settle(y.index_select(0, rows), POS_INF)
    y.index_copy_(0, rows, fixed)
    finite = torch.ones_like(odd)
    finite[rows] = torch.isfinite(fixed.amax(-1))
    if bool(finite.any()):
        keep = finite.nonzero()[:, 0]
        rest = y.index_select(0, keep)
        drop_filtered(rest, top_k.index_select(0, keep), top_p.index_select(0, keep), min_p.index_select(0, keep))
        y.index_copy_(0, keep, rest)


def drop_filtered(y: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor, min_p: torch.Tensor) -> None:
    """Sets -inf in y (fp32 [n, vocab], already divided by temperature) outside every filter:
    top_k (int64 [n, 1], 0 = off), top_p and min_p (fp32 [n, 1], 1 / 0 = off)."""
    vocab = y.shape[1]
    cand_y, cand_ids = y.topk(min(CANDIDATES, vocab), dim=-1)
    odd = ~torch.isfinite(cand_y[:, 0])
    if bool(odd.any()):
        _filter_nonfinite(y, odd, top_k, top_p, min_p)
        return
    cand = (cand_y - cand_y[:, :1]).exp_()
    e = _RowExp(y, cand_y[:, :1])
    k_on, k_floor = _top_k_floor(cand, top_k, vocab, e)
    floor = torch.maximum(k_floor, min_p)
    if bool((top_p < 1).any()):
        floor = torch.maximum(floor, _top_p_floor(cand, k_on, k_floor, top_p, vocab, e))
    _write_kept(y, cand_y, cand_ids, cand, floor, e)
