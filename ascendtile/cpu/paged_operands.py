"""What the two CPU attention kernels (decode_attention.py, unified_attention.py) take alike: query
rows [N, H, D] over paged caches [num_blocks, block_size, KVH, D] of one float dtype and a head dim
with a compiled kernel. Their op bodies check the rest of their operands in C++
(dispatch_source.py `check_paged`)."""
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
