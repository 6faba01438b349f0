"""The collectives the parallel layers need, over the tensor-parallel group. In a group of one
they return their input untouched (no torch.distributed call), so a single-device model and its
compiled graphs see no collective at all."""
from __future__ import annotations

import torch
import torch.distributed as dist

from ascendkit.distributed.group import tp_size


def all_reduce(x: torch.Tensor) -> torch.Tensor:
    """The elementwise sum of `x` over the group, in place (row-parallel partial products)."""
    if tp_size() == 1:
        return x
    dist.all_reduce(x)
    return x


def all_gather(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Every rank's `x` concatenated along `dim` in rank order (vocab-parallel logits)."""
    size = tp_size()
    if size == 1:
        return x
    x = x.contiguous()
    parts = [torch.empty_like(x) for _ in range(size)]
    dist.all_gather(parts, x)
    return torch.cat(parts, dim=dim)
