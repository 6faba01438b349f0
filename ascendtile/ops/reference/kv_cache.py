"""References: reshape_and_cache_flash, concat_and_cache_mla. A slot outside
[0, num_blocks · block_size) (−1 = padding, or a bad index) is skipped, as in the kernels."""
from __future__ import annotations

import torch


def _block_and_offset(slot_mapping: torch.Tensor, num_blocks: int,
                      block_size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    valid = ((slot_mapping >= 0) & (slot_mapping < num_blocks * block_size)).nonzero().squeeze(1)
    slots = slot_mapping.index_select(0, valid).long()
    return valid, slots // block_size, slots % block_size


def _all_in_range(slot_mapping: torch.Tensor, limit: int) -> bool:
    """Every slot in [0, limit), from one reduction pass (aminmax, not min and max)."""
    low, high = torch.aminmax(slot_mapping)
    return int(low) >= 0 and int(high) < limit


def reshape_and_cache_flash(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                            slot_mapping: torch.Tensor, kv_cache_dtype: str, k_scale: torch.Tensor,
                            v_scale: torch.Tensor) -> None:
    # kv_cache_dtype "auto" (the only one accepted): stored as is, the scales are unused.
    tokens = slot_mapping.shape[0]
    num_blocks, block_size = key_cache.shape[:2]
    contiguous = key_cache.is_contiguous() and value_cache.is_contiguous()
    if tokens and contiguous and _all_in_range(slot_mapping, num_blocks * block_size):
        # Every slot valid (every decode step of a real batch): one index_copy_ per cache into its
        # [slots, KVH, D] view instead of nonzero + index_select + two-index put (~2x less time).
        slots = slot_mapping.long()
        key_cache.view(-1, *key_cache.shape[2:]).index_copy_(0, slots, key[:tokens])
        value_cache.view(-1, *value_cache.shape[2:]).index_copy_(0, slots, value[:tokens])
        return
    valid, block, offset = _block_and_offset(slot_mapping, num_blocks, block_size)
    key_cache[block, offset] = key.index_select(0, valid)
    value_cache[block, offset] = value.index_select(0, valid)


def concat_and_cache_mla(kv_c: torch.Tensor, k_pe: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
                         kv_cache_dtype: str, scale: torch.Tensor) -> None:
    valid, block, offset = _block_and_offset(slot_mapping, kv_cache.shape[0], kv_cache.shape[1])
    rank = kv_c.shape[-1]
    kv_cache[block, offset, :rank] = kv_c.index_select(0, valid)
    kv_cache[block, offset, rank:] = k_pe.reshape(k_pe.shape[0], -1).index_select(0, valid)
