"""How LLM runs with tensor_parallel_size N: the size check, the two launch modes (spawned
workers, or this process is already one rank: launched by torchrun, or a group initialised by
the caller), and the device of a rank."""
from __future__ import annotations

import os

import torch

from ascendtile.distributed import init_tensor_parallel, tp_rank, tp_size

TORCHRUN_ENV = ("WORLD_SIZE", "RANK", "LOCAL_RANK")


def check_tensor_parallel_size(size: object) -> int:
    """size itself if it is an int >= 1; ValueError / TypeError naming tensor_parallel_size."""
    if isinstance(size, bool) or not isinstance(size, int):
        raise TypeError(f"tensor_parallel_size: must be an int, got {type(size).__name__}")
    if size < 1:
        raise ValueError(f"tensor_parallel_size: must be >= 1, got {size}")
    return size


def rank_device(device: torch.device, rank: int) -> torch.device:
    """The device of `rank` (its local rank under torchrun): index = rank on NPU/CUDA, set as
    the process's current device (the collective libraries use it); CPU ranks share the CPU."""
    if device.type == "cpu":
        return device
    device = torch.device(device.type, rank)
    getattr(torch, device.type).set_device(device)
    return device


def join_existing_group(size: int, device: torch.device, timeout_s: float) -> torch.device | None:
    """When this process is already one rank of `size` (a group initialised by the caller, or a
    torchrun launch: WORLD_SIZE / RANK / LOCAL_RANK set, joined here over env://; the group then
    lives as long as the process, for every LLM it makes), the rank's device; None when the
    workers must be spawned. Raises ValueError naming tensor_parallel_size when the launch's
    world size is another."""
    if tp_size() > 1:
        if tp_size() != size:
            raise ValueError(f"tensor_parallel_size: {size}, but this process is a rank of a group of {tp_size()}")
        local = int(os.environ.get("LOCAL_RANK", tp_rank()))
        return rank_device(device, local)
    if not all(name in os.environ for name in TORCHRUN_ENV):
        return None
    world, rank, local = (int(os.environ[name]) for name in TORCHRUN_ENV)
    if world != size:
        raise ValueError(f"tensor_parallel_size: {size}, but torchrun launched WORLD_SIZE={world} processes")
    device = rank_device(device, local)
    init_tensor_parallel(world, rank, "env://", str(device), timeout_s)
    return device
