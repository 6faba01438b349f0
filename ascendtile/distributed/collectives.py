"""The collectives the parallel layers need, over the tensor-parallel group. In a group of one
they return their input untouched (no torch.distributed call, nothing counted), so a
single-device model and its compiled graphs see no collective at all.

Each process counts the bytes its collectives move (`collective_bytes`): a cheap per-process
tally the runtime reads around a generate() call, so the benchmark can report the traffic of a
decode step. The count is taken where the torch.distributed call runs, so a compiled graph
counts like eager code: each collective is also a torch custom op (`torch.ops.ascend_dist.*`),
which a torch.compile trace keeps as one graph node (its fake impl gives the shape at trace
time, nothing is counted then), and whose implementation, the same function eager calls
directly, makes the call and counts it every time the graph runs (the compiled graph of levels
1 and 2, the pieces of level 3). Not counted: replays of a captured device graph on NPU/CUDA (the
GraphRunner's decode graphs, level 3's captured pieces), which replay the recorded collective on
the device and run no host code; only the runs while capturing are counted."""
from __future__ import annotations

from typing import Callable

import torch
import torch.distributed as dist

from ascendtile.distributed.group import tp_size

# bytes per collective kind since the process started: all_reduce counts the reduced tensor,
# all_gather the gathered result (what every rank receives).
_BYTES = {"all_reduce": 0, "all_gather": 0}
_REDUCE_OPS = {"sum": dist.ReduceOp.SUM, "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX}


def _count(kind: str, x: torch.Tensor) -> None:
    _BYTES[kind] += x.numel() * x.element_size()


def collective_bytes() -> dict[str, int]:
    """{"all_reduce": bytes, "all_gather": bytes} moved by this process's collectives so far
    (read twice and subtract for the bytes of a span of work)."""
    return dict(_BYTES)


def _all_reduce_in_place(x: torch.Tensor, op: str) -> None:
    dist.all_reduce(x, op=_REDUCE_OPS[op])
    _count("all_reduce", x)


def _gathered(x: torch.Tensor, dim: int, world_size: int) -> torch.Tensor:
    x = x.contiguous()
    parts = [torch.empty_like(x) for _ in range(world_size)]
    dist.all_gather(parts, x)
    out = torch.cat(parts, dim=dim)
    _count("all_gather", out)
    return out


_ALL_REDUCE_OP = torch.library.custom_op("ascend_dist::all_reduce", _all_reduce_in_place, mutates_args=("x",))
_ALL_GATHER_OP = torch.library.custom_op("ascend_dist::all_gather", _gathered, mutates_args=())


@_ALL_GATHER_OP.register_fake
def _gathered_shape(x: torch.Tensor, dim: int, world_size: int) -> torch.Tensor:
    shape = list(x.shape)
    shape[dim] *= world_size
    return x.new_empty(shape)


def _call(op: Callable, implementation: Callable, *args) -> torch.Tensor | None:
    """The custom op while tracing (the graph keeps the node and calls it per run), else its
    implementation directly: eager calls skip the dispatcher (~13 µs each)."""
    return op(*args) if torch.compiler.is_compiling() else implementation(*args)


def all_reduce(x: torch.Tensor, op: str = "sum") -> torch.Tensor:
    """The elementwise reduction (op "sum", "min" or "max") of `x` over the group, in place:
    row-parallel partial products are summed; the runtime agrees on a KV block count with "min"."""
    if op not in _REDUCE_OPS:
        raise ValueError(f"op: must be one of {sorted(_REDUCE_OPS)}, got {op!r}")
    if tp_size() == 1:
        return x
    _call(_ALL_REDUCE_OP, _all_reduce_in_place, x, op)
    return x


def all_gather(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Every rank's `x` concatenated along `dim` in rank order (vocab-parallel logits)."""
    size = tp_size()
    if size == 1:
        return x
    return _call(_ALL_GATHER_OP, _gathered, x, dim, size)
