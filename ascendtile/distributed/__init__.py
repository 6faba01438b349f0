"""Tensor parallelism over torch.distributed: the process group of one model's shards
(`group.py`: init from the device's backend, rank, world size) and the collectives the parallel
layers call (`collectives.py`, with a per-process count of the bytes they move). A process that
never calls `init_tensor_parallel` is a group of one, where every collective returns its input:
the single-device path pays nothing."""
from ascendtile.distributed.collectives import all_gather, all_reduce, collective_bytes
from ascendtile.distributed.group import (backend_for, destroy_tensor_parallel, init_tensor_parallel,
                                         local_init_method, tp_rank, tp_size)

__all__ = ["all_gather", "all_reduce", "backend_for", "collective_bytes", "destroy_tensor_parallel",
           "init_tensor_parallel", "local_init_method", "tp_rank", "tp_size"]
