"""References: reshape_and_cache_flash, concat_and_cache_mla. A slot outside
[0, num_blocks · block_size) (−1 = padding, or a bad index) is skipped, as in the kernels. With
kv_cache_dtype "int8" the written rows are quantized first (_kv_quant.py)."""
from __future__ import annotations

import torch

from ascendtile.ops.reference._kv_quant import quantize_dynamic, quantize_static, static_scale


def _block_and_offset(slot_mapping: torch.Tensor, num_blocks: int,
                      block_size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    valid = ((slot_mapping >= 0) & (slot_mapping < num_blocks * block_size)).nonzero().squeeze(1)
    slots = slot_mapping.index_select(0, valid).long()
    return valid, slots // block_size, slots % block_size


def _all_in_range(slot_mapping: torch.Tensor, limit: int) -> bool:
    """Every slot in [0, limit), from one reduction pass (aminmax, not min and max)."""
    low, high = torch.aminmax(slot_mapping)
    return int(low) >= 0 and int(high) < limit


def _quantized(rows: torch.Tensor, kv_cache_dtype: str, scale: torch.Tensor,
               scale_cache: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(rows as the cache stores them, their dynamic scales [T, heads] or None). rows [T, heads, D]."""
    if kv_cache_dtype != "int8":  # "auto" (anything else never passes validation)
        return rows, None
    if scale_cache is not None:
        return quantize_dynamic(rows)
    return quantize_static(rows, static_scale(scale, rows.shape[1])), None


def reshape_and_cache_flash(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                            slot_mapping: torch.Tensor, kv_cache_dtype: str, k_scale: torch.Tensor,
                            v_scale: torch.Tensor, k_scale_cache: torch.Tensor | None = None,
                            v_scale_cache: torch.Tensor | None = None) -> None:
    tokens = slot_mapping.shape[0]
    num_blocks, block_size = key_cache.shape[:2]
    contiguous = key_cache.is_contiguous() and value_cache.is_contiguous()
    if tokens and contiguous and _all_in_range(slot_mapping, num_blocks * block_size):
        # Every slot valid (every decode step of a real batch): one index_copy_ per cache into its
        # [slots, KVH, D] view instead of nonzero + index_select + two-index put (~2x less time).
        slots = slot_mapping.long()
        for rows, cache, scale, scale_cache in ((key, key_cache, k_scale, k_scale_cache),
                                                (value, value_cache, v_scale, v_scale_cache)):
            stored, scales = _quantized(rows[:tokens], kv_cache_dtype, scale, scale_cache)
            cache.view(-1, *cache.shape[2:]).index_copy_(0, slots, stored)
            if scales is not None:
                scale_cache.permute(0, 2, 1)[slots // block_size, slots % block_size] = scales
        return
    valid, block, offset = _block_and_offset(slot_mapping, num_blocks, block_size)
    for rows, cache, scale, scale_cache in ((key, key_cache, k_scale, k_scale_cache),
                                            (value, value_cache, v_scale, v_scale_cache)):
        stored, scales = _quantized(rows.index_select(0, valid), kv_cache_dtype, scale, scale_cache)
        cache[block, offset] = stored
        if scales is not None:
            scale_cache.permute(0, 2, 1)[block, offset] = scales


def concat_and_cache_mla(kv_c: torch.Tensor, k_pe: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
                         kv_cache_dtype: str, scale: torch.Tensor, scale_cache: torch.Tensor | None = None) -> None:
    valid, block, offset = _block_and_offset(slot_mapping, kv_cache.shape[0], kv_cache.shape[1])
    rank = kv_c.shape[-1]
    parts = (kv_c.index_select(0, valid), k_pe.reshape(k_pe.shape[0], -1).index_select(0, valid))
    for part, (lo, hi) in enumerate(((0, rank), (rank, kv_cache.shape[2]))):
        # one "head" per part: [T, 1, width]
        stored, scales = _quantized(parts[part][:, None], kv_cache_dtype, scale, scale_cache)
        kv_cache[block, offset, lo:hi] = stored[:, 0]
        if scales is not None:
            scale_cache[block, part, offset] = scales[:, 0]


def reshape_and_cache_flash_traceable(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor,
                                      value_cache: torch.Tensor, slot_mapping: torch.Tensor, kv_cache_dtype: str,
                                      k_scale: torch.Tensor, v_scale: torch.Tensor,
                                      k_scale_cache: torch.Tensor | None = None,
                                      v_scale_cache: torch.Tensor | None = None) -> None:
    """reshape_and_cache_flash into float caches (kv_cache_dtype "auto") for a traced graph
    (compilation/decompose.py): the same writes, with no host read and no shape that depends on
    values. Every token is written by one index_copy_ per cache; a skipped token (slot -1 or out of
    range) rewrites the first written token's slot with that token's own row, so the duplicates
    index_copy_ sees carry equal rows, and when no token is written every token rewrites slot 0
    with the row it already holds."""
    if kv_cache_dtype != "auto":
        raise ValueError(f"kv_cache_dtype: the traceable KV write takes float caches ('auto'), got {kv_cache_dtype!r}")
    tokens = slot_mapping.shape[0]
    slots = slot_mapping.long()
    written = (slots >= 0) & (slots < key_cache.shape[0] * key_cache.shape[1])
    first = written.to(torch.int32).argmax().reshape(1)  # the first written token (0 when none is)
    any_written = written.any()
    source = torch.where(written, torch.arange(tokens, device=slots.device), first)
    target = torch.where(written, slots, torch.where(any_written, slots.index_select(0, first), 0))
    for rows, cache in ((key, key_cache), (value, value_cache)):
        flat = cache.view(-1, *cache.shape[2:])
        flat.index_copy_(0, target, torch.where(any_written, rows[:tokens].index_select(0, source), flat[0]))
