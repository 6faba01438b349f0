"""How a layer's heads, rows and vocabulary divide over the tensor-parallel group: each rank's
share is a contiguous range of the whole. A count that cannot be divided is a ValueError naming
the config field it came from, except the vocabulary, which is padded (vLLM's way) so that any
vocab_size splits."""
from __future__ import annotations

from typing import NamedTuple


class Share(NamedTuple):
    """This rank's part of a dimension: `count` items from `start`, out of `total`. In a padded
    share (padded_split) start + count may pass `total`: the items from `total` on are padding."""
    count: int
    start: int
    total: int

    def scaled(self, factor: int) -> Share:
        """The same share in units `factor` times smaller (heads -> rows of head_dim each)."""
        return Share(self.count * factor, self.start * factor, self.total * factor)


def split_evenly(total: int, field: str, size: int, rank: int) -> Share:
    """Rank `rank`'s equal part of `total` items over `size` ranks."""
    if total % size:
        raise ValueError(f"{field}: {total} is not divisible by tensor_parallel_size {size}")
    count = total // size
    return Share(count, rank * count, total)


def kv_head_share(num_kv_heads: int, field: str, size: int, rank: int) -> Share:
    """KV heads split like query heads while there are at least as many as ranks; with fewer,
    each rank keeps one copy of the KV head its query heads attend to (ranks r·N/KVH ..
    (r+1)·N/KVH - 1 share KV head r), so GQA groups never straddle ranks."""
    if num_kv_heads >= size:
        return split_evenly(num_kv_heads, field, size, rank)
    if size % num_kv_heads:
        raise ValueError(f"{field}: {num_kv_heads} KV heads cannot be replicated evenly over "
                         f"tensor_parallel_size {size} (it must be a multiple of them)")
    return Share(1, rank // (size // num_kv_heads), num_kv_heads)


def padded_split(total: int, size: int, rank: int) -> Share:
    """Rank `rank`'s part of `total` items padded up to a multiple of `size`: every rank holds
    ceil(total / size) items, and the last ranks' items from `total` on are padding (the loader
    zero-fills them; the vocabulary's padded logits are trimmed after gathering)."""
    count = -(-total // size)
    return Share(count, rank * count, total)
