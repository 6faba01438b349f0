"""Guard buffers for the index-safety tests: a tensor placed in the middle rows of a larger one
whose margin rows hold NaN, so an op that follows a bad index past either end of the tensor is
caught. A write overwrites the NaN (guards_intact fails); a read brings NaN into the result.

The margins are GUARD rows of dim 0 (blocks of a paged cache, rows of a cos/sin cache), so an
index up to GUARD past the end, or down to -GUARD, lands in them rather than in memory the test
does not own (which under the interpreter may crash instead of failing)."""
from __future__ import annotations

import torch

GUARD = 2


def guarded(t: torch.Tensor) -> torch.Tensor:
    """A [GUARD + n + GUARD, ...] NaN buffer holding t in rows [GUARD, GUARD + n)."""
    buf = torch.full((t.shape[0] + 2 * GUARD, *t.shape[1:]), float("nan"), dtype=t.dtype)
    buf[GUARD:GUARD + t.shape[0]] = t
    return buf


def inner(buf: torch.Tensor) -> torch.Tensor:
    """The guarded tensor: a view of buf's middle rows (contiguous when buf is)."""
    return buf[GUARD:buf.shape[0] - GUARD]


def guards_intact(buf: torch.Tensor) -> bool:
    return bool(buf[:GUARD].isnan().all() and buf[buf.shape[0] - GUARD:].isnan().all())
