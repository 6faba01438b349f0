"""What the two CPU attention kernels (decode_attention.py, unified_attention.py) take alike: query
rows [N, H, D] over paged caches [num_blocks, block_size, KVH, D] of one float dtype, a head dim
with a compiled kernel, and the errors that name the operand a call got wrong."""
from __future__ import annotations

import torch

from ascendtile.cpu.build import DTYPES

HEAD_DIMS = (16, 32, 64, 80, 96, 128, 256)


def supports(query: torch.Tensor, key_cache: torch.Tensor) -> bool:
    """Whether the kernels serve this query [N, H, D] and cache [num_blocks, block_size, KVH, D]."""
    return (query.device.type == "cpu" and query.dtype in DTYPES and key_cache.dtype == query.dtype
            and query.dim() == 3 and query.shape[-1] in HEAD_DIMS and key_cache.dim() == 4
            and key_cache.shape[-1] == query.shape[-1] and query.shape[1] % key_cache.shape[2] == 0)


def check_variants(variants: list[tuple[torch.dtype, int]]) -> None:
    """ValueError unless every (dtype, head dim) to load has a head dim with a kernel."""
    unserved = sorted({v[1] for v in variants if v[1] not in HEAD_DIMS})
    if unserved:
        raise ValueError(f"variants: no kernel for the head dims {unserved}; head dims {HEAD_DIMS}")


def check(op: str, loaded: dict, out: torch.Tensor, query: torch.Tensor, key_cache: torch.Tensor,
          value_cache: torch.Tensor, block_table: torch.Tensor) -> None:
    """Raise what is wrong with the operands both kernels share (op's quick check failed; loaded:
    its entry points by (dtype, head dim)); return when they are right, for op to check its own."""
    if not supports(query, key_cache):
        raise ValueError(f"query / key_cache: no kernel for {query.dtype} {tuple(query.shape)} over "
                         f"{key_cache.dtype} {tuple(key_cache.shape)} (head dims {HEAD_DIMS})")
    if (query.dtype, query.shape[-1]) not in loaded:
        raise RuntimeError(f"{op}: the kernel is not loaded for {query.dtype} and head dim {query.shape[-1]} "
                           f"(ascendtile.cpu.{op.removeprefix('cpu_')}.load)")
    for name, t in (("out", out), ("value_cache", value_cache)):
        if t.dtype != query.dtype:
            raise ValueError(f"{name}: dtype {t.dtype}, expected the query's {query.dtype}")
    if out.shape != query.shape or value_cache.shape != key_cache.shape or value_cache.stride() != key_cache.stride():
        raise ValueError("out / value_cache: shapes (and the caches' strides) must match query's and key_cache's")
    for name, t in (("out", out), ("query", query), ("key_cache", key_cache), ("block_table", block_table)):
        if t.stride(-1) != 1:
            raise ValueError(f"{name}: the last dim must be contiguous")
