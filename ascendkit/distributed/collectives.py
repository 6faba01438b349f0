"""The collectives the parallel layers need, over the tensor-parallel group. In a group of one
they return their input untouched (no torch.distributed call, nothing counted), so a
single-device model and its compiled graphs see no collective at all.

Each process counts the bytes its collectives move (`collective_bytes`): a cheap per-process
tally the runtime reads around a generate() call, so the benchmark can report the traffic of a
decode step. Calls inside a torch.compile trace are not counted (the count would run once, at
trace time, not per call)."""
from __future__ import annotations

import torch
import torch.distributed as dist

from ascendkit.distributed.group import tp_size

# bytes per collective kind since the process started: all_reduce counts the reduced tensor,
# all_gather the gathered result (what every rank receives).
_BYTES = {"all_reduce": 0, "all_gather": 0}
_REDUCE_OPS = {"sum": dist.ReduceOp.SUM, "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX}


def _count(kind: str, x: torch.Tensor) -> None:
    if not torch.compiler.is_compiling():
        _BYTES[kind] += x.numel() * x.element_size()


def collective_bytes() -> dict[str, int]:
    """{"all_reduce": bytes, "all_gather": bytes} moved by this process's collectives so far
    (read twice and subtract for the bytes of a span of work)."""
    return dict(_BYTES)


def all_reduce(x: torch.Tensor, op: str = "sum") -> torch.Tensor:
    """The elementwise reduction (op "sum", "min" or "max") of `x` over the group, in place:
    row-parallel partial products are summed; the runtime agrees on a KV block count with "min"."""
    if op not in _REDUCE_OPS:
        raise ValueError(f"op: must be one of {sorted(_REDUCE_OPS)}, got {op!r}")
    if tp_size() == 1:
        return x
    dist.all_reduce(x, op=_REDUCE_OPS[op])
    _count("all_reduce", x)
    return x


def all_gather(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Every rank's `x` concatenated along `dim` in rank order (vocab-parallel logits)."""
    size = tp_size()
    if size == 1:
        return x
    x = x.contiguous()
    parts = [torch.empty_like(x) for _ in range(size)]
    dist.all_gather(parts, x)
    out = torch.cat(parts, dim=dim)
    _count("all_gather", out)
    return out
