"""The tensor-parallel process group: one process per device, every process holding one shard of
every layer. Layers read `tp_size()` / `tp_rank()` when they are built, so the group must be
initialised before the model is."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import socket

import torch.distributed as dist

# torch.distributed backend per device type: the device's own collective library.
BACKENDS = {"cpu": "gloo", "cuda": "nccl", "npu": "hccl"}


@dataclass
class _Group:
    size: int = 1
    rank: int = 0


_GROUP = _Group()


def backend_for(device: str) -> str:
    """The torch.distributed backend for a device ("cpu", "cuda:1", "npu", ...)."""
    kind = device.split(":")[0]
    if kind not in BACKENDS:
        raise ValueError(f"device: {device!r} has no tensor-parallel backend; supported: {sorted(BACKENDS)}")
    return BACKENDS[kind]


def init_tensor_parallel(world_size: int, rank: int, init_method: str, device: str = "cpu",
                         timeout_s: float = 120.0) -> None:
    """Join the group of `world_size` processes as `rank`, rendezvousing at `init_method`
    ("tcp://host:port", "env://" under torchrun). A world of 1 creates no process group.
    timeout_s bounds the rendezvous and every collective, so a dead peer is an error, not a hang."""
    if world_size < 1:
        raise ValueError(f"world_size: must be >= 1, got {world_size}")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank: must be in [0, {world_size}), got {rank}")
    if _GROUP.size != 1 or dist.is_initialized():
        raise RuntimeError("init_tensor_parallel: a tensor-parallel group is already initialised in this process")
    if world_size > 1:
        dist.init_process_group(backend_for(device), init_method=init_method, world_size=world_size, rank=rank,
                                timeout=timedelta(seconds=timeout_s))
    _GROUP.size, _GROUP.rank = world_size, rank


def local_init_method() -> str:
    """A "tcp://127.0.0.1:port" rendezvous on a port free now, for ranks spawned on this machine."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"


def destroy_tensor_parallel() -> None:
    """Leave the group (the process is a group of one again)."""
    if dist.is_initialized():
        dist.destroy_process_group()
    _GROUP.size, _GROUP.rank = 1, 0


def tp_size() -> int:
    return _GROUP.size


def tp_rank() -> int:
    return _GROUP.rank
