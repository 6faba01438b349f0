"""reshape_and_cache_flash over real KV layouts, concat_and_cache_mla over DeepSeek-V2's latent
layout, x token counts, into caches with distinct random slots; baseline _npu_reshape_and_cache."""
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


def _mla(tokens: int, dtype: torch.dtype) -> KernelCase:
    def setup(device):
        kv_c = torch.randn(tokens, KV_LORA_RANK, dtype=dtype, device=device)
        k_pe = torch.randn(tokens, ROPE_DIM, dtype=dtype, device=device)
        cache = torch.zeros(_blocks(tokens), CACHE_BLOCK_SIZE, KV_LORA_RANK + ROPE_DIM, dtype=dtype, device=device)
        slots = distinct_slots(tokens, _blocks(tokens), CACHE_BLOCK_SIZE, device)
        one = torch.ones((), dtype=torch.float32, device=device)
        return lambda: torch.ops.ascend.concat_and_cache_mla(kv_c, k_pe, cache, slots, "auto", one)

    return KernelCase(
        "kv_cache", "concat_and_cache_mla", {"tokens": tokens, "kv_lora_rank": KV_LORA_RANK, "rope_dim": ROPE_DIM}, dtype,
        bytes_moved=2 * tokens * (KV_LORA_RANK + ROPE_DIM) * element_size(dtype) + tokens * 8,
        flops=0, setup=setup,
    )


@bench_cases("kv_cache")
def _cases(dtype: torch.dtype, quick: bool) -> list[KernelCase]:
    layouts = {(kv, d) for _, kv, d in attention_layouts(quick).values()}
    flash = [_flash(t, kv, d, dtype) for kv, d in sorted(layouts) for t in token_counts(quick)]
    return flash + [_mla(t, dtype) for t in token_counts(quick)]
