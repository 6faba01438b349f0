"""reshape_and_cache_flash over real KV layouts, concat_and_cache_mla over DeepSeek-V2's latent
layout, x token counts, into caches with distinct random slots; baseline _npu_reshape_and_cache.
reshape_and_cache_flash also into an int8 cache with dynamic scales (kv_int8=1 in the name)."""
from __future__ import annotations

import torch

from ascendtile.bench.cases import (
    CACHE_BLOCK_SIZE, KernelCase, attention_layouts, bench_cases, distinct_slots, element_size, token_counts, torch_npu,
)

KV_LORA_RANK, ROPE_DIM = 512, 64  # DeepSeek-V2/V3 latent cache row: 576 = shape_grid's MLA head dim


def _blocks(tokens: int) -> int:
    return -(-tokens // CACHE_BLOCK_SIZE) + 4  # room for every token plus spare blocks


def _flash(tokens: int, kv_heads: int, head_dim: int, dtype: torch.dtype) -> KernelCase:
    def inputs(device):
        key = torch.randn(tokens, kv_heads, head_dim, dtype=dtype, device=device)
        value = torch.randn_like(key)
        cache_shape = (_blocks(tokens), CACHE_BLOCK_SIZE, kv_heads, head_dim)
        caches = torch.zeros(cache_shape, dtype=dtype, device=device), torch.zeros(cache_shape, dtype=dtype, device=device)
        return key, value, *caches, distinct_slots(tokens, _blocks(tokens), CACHE_BLOCK_SIZE, device)

    def setup(device):
        key, value, key_cache, value_cache, slots = inputs(device)
        one = torch.ones((), dtype=torch.float32, device=device)
        return lambda: torch.ops.ascend.reshape_and_cache_flash(key, value, key_cache, value_cache, slots, "auto", one, one)

    def baseline(device):
        key, value, key_cache, value_cache, slots = inputs(device)
        slots = slots.to(torch.int32)
        return lambda: torch_npu()._npu_reshape_and_cache(key=key, value=value, key_cache=key_cache,
                                                          value_cache=value_cache, slot_indices=slots)

    moved = tokens * kv_heads * head_dim * element_size(dtype)
    return KernelCase(
        "kv_cache", "reshape_and_cache_flash", {"tokens": tokens, "kv_heads": kv_heads, "head_dim": head_dim}, dtype,
        bytes_moved=4 * moved + tokens * 8,  # read key and value, write both cache rows, read the slots
        flops=0, setup=setup, baseline=baseline, baseline_name="_npu_reshape_and_cache",
    )


def _flash_int8(tokens: int, kv_heads: int, head_dim: int, dtype: torch.dtype) -> KernelCase:
    def setup(device):
        key = torch.randn(tokens, kv_heads, head_dim, dtype=dtype, device=device)
        value = torch.randn_like(key)
        blocks = _blocks(tokens)
        cache_shape = (blocks, CACHE_BLOCK_SIZE, kv_heads, head_dim)
        caches = [torch.zeros(cache_shape, dtype=torch.int8, device=device) for _ in range(2)]
        scales = [torch.zeros(blocks, kv_heads, CACHE_BLOCK_SIZE, device=device) for _ in range(2)]
        slots = distinct_slots(tokens, blocks, CACHE_BLOCK_SIZE, device)
        one = torch.ones((), dtype=torch.float32, device=device)
        return lambda: torch.ops.ascend.reshape_and_cache_flash(key, value, *caches, slots, "int8", one, one, *scales)

    rows = tokens * kv_heads
    return KernelCase(
        "kv_cache", "reshape_and_cache_flash", {"tokens": tokens, "kv_heads": kv_heads, "head_dim": head_dim,
                                                "kv_int8": 1}, dtype,
        # read key and value, write their int8 rows and fp32 scales, read the slots
        bytes_moved=2 * rows * head_dim * element_size(dtype) + 2 * rows * (head_dim + 4) + tokens * 8,
        flops=6 * 2 * rows * head_dim,  # |x|, max, divide, round (floor, compare, select): ~6 per element
        setup=setup,
    )


def _mla(tokens: int, dtype: torch.dtype, kv_int8: bool) -> KernelCase:
    width = KV_LORA_RANK + ROPE_DIM

    def setup(device):
        kv_c = torch.randn(tokens, KV_LORA_RANK, dtype=dtype, device=device)
        k_pe = torch.randn(tokens, ROPE_DIM, dtype=dtype, device=device)
        cache = torch.zeros(_blocks(tokens), CACHE_BLOCK_SIZE, width, dtype=torch.int8 if kv_int8 else dtype,
                            device=device)
        slots = distinct_slots(tokens, _blocks(tokens), CACHE_BLOCK_SIZE, device)
        one = torch.ones((), dtype=torch.float32, device=device)
        if kv_int8:  # dynamic: a latent and a rope scale per token
            scales = torch.zeros(_blocks(tokens), 2, CACHE_BLOCK_SIZE, device=device)
            return lambda: torch.ops.ascend.concat_and_cache_mla(kv_c, k_pe, cache, slots, "int8", one, scales)
        return lambda: torch.ops.ascend.concat_and_cache_mla(kv_c, k_pe, cache, slots, "auto", one)

    written = tokens * (width + 2 * 4) if kv_int8 else tokens * width * element_size(dtype)
    shape = {"tokens": tokens, "kv_lora_rank": KV_LORA_RANK, "rope_dim": ROPE_DIM}
    return KernelCase(
        "kv_cache", "concat_and_cache_mla", {**shape, "kv_int8": 1} if kv_int8 else shape, dtype,
        bytes_moved=tokens * width * element_size(dtype) + written + tokens * 8,
        flops=6 * tokens * width if kv_int8 else 0, setup=setup,
    )


@bench_cases("kv_cache")
def _cases(dtype: torch.dtype, quick: bool) -> list[KernelCase]:
    layouts = {(kv, d) for _, kv, d in attention_layouts(quick).values()}
    flash = [make(t, kv, d, dtype) for kv, d in sorted(layouts) for t in token_counts(quick) for make in (_flash, _flash_int8)]
    return flash + [_mla(t, dtype, kv_int8) for t in token_counts(quick) for kv_int8 in (False, True)]
