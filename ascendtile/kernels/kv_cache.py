"""Paged KV-cache writes: reshape_and_cache_flash (K and V, [num_blocks, block_size, heads,
head_size]) and concat_and_cache_mla (latent cache, [num_blocks, block_size, rank + rope_dim]).

Vector kernels persistent over tokens. Each token's slot is read as a scalar; a slot outside
[0, num_blocks · block_size) (−1 = padding, or a bad index) skips the token: a scalar compare,
so a bad slot never writes outside the cache. Otherwise the destination is one scalar base
address (block × block stride in int64, so caches over 2^31 elements are addressed correctly)
and the token's rows are copied as contiguous [heads, head_size] tiles: no gather, no
per-element addressing.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ascendtile.platform import grid_size

# Elements per copied tile (a copy holds only the loaded tile): 8192 fp16 values = 16 KB.
MAX_TILE = 8192


@triton.jit
def _slot_address(cache_ptr, slot, block_stride, slot_stride, BLOCK_SIZE: tl.constexpr):
    """Cache address of an int64 slot id: block id × block stride stays int64 (no overflow)."""
    block = slot // BLOCK_SIZE
    return cache_ptr + block * block_stride + (slot - block * BLOCK_SIZE) * slot_stride


@triton.jit
def _copy_heads(src, dst, src_head_stride, dst_head_stride, N_HEADS: tl.constexpr, DIM: tl.constexpr,
                HEAD_BLOCK: tl.constexpr, DIM_BLOCK: tl.constexpr):
    """dst[h, :DIM] = src[h, :DIM] for N_HEADS heads, HEAD_BLOCK heads per tile."""
    heads = tl.arange(0, HEAD_BLOCK)[:, None]
    d = tl.arange(0, DIM_BLOCK)[None, :]
    for h0 in range(0, N_HEADS, HEAD_BLOCK):
        mask = (h0 + heads < N_HEADS) & (d < DIM)
        x = tl.load(src + (h0 + heads) * src_head_stride + d, mask=mask)
        tl.store(dst + (h0 + heads) * dst_head_stride + d, x, mask=mask)


@triton.jit
def _slot_ok(slot, num_blocks, BLOCK_SIZE: tl.constexpr):
    """0 <= slot < num_blocks · BLOCK_SIZE (int64 scalars: no overflow)."""
    return (slot >= 0) & (slot < tl.cast(num_blocks, tl.int64) * BLOCK_SIZE)


@triton.jit(do_not_specialize=["n_tokens", "num_blocks", "k_tok_stride", "k_head_stride", "v_tok_stride",
                               "v_head_stride", "kc_block_stride", "kc_slot_stride", "kc_head_stride",
                               "vc_block_stride", "vc_slot_stride", "vc_head_stride"])
def reshape_and_cache_flash_kernel(
    key_ptr, value_ptr, key_cache_ptr, value_cache_ptr, slot_ptr,
    n_tokens, num_blocks, k_tok_stride, k_head_stride, v_tok_stride, v_head_stride,
    kc_block_stride, kc_slot_stride, kc_head_stride, vc_block_stride, vc_slot_stride, vc_head_stride,
    N_HEADS: tl.constexpr, HEAD_SIZE: tl.constexpr, BLOCK_SIZE: tl.constexpr,
    HEAD_BLOCK: tl.constexpr, DIM_BLOCK: tl.constexpr,
):
    for t in range(tl.program_id(0), n_tokens, tl.num_programs(0)):
        t64 = tl.cast(t, tl.int64)
        slot = tl.load(slot_ptr + t64).to(tl.int64)
        if _slot_ok(slot, num_blocks, BLOCK_SIZE):
            k_dst = _slot_address(key_cache_ptr, slot, kc_block_stride, kc_slot_stride, BLOCK_SIZE)
            v_dst = _slot_address(value_cache_ptr, slot, vc_block_stride, vc_slot_stride, BLOCK_SIZE)
            _copy_heads(key_ptr + t64 * k_tok_stride, k_dst, k_head_stride, kc_head_stride,
                        N_HEADS, HEAD_SIZE, HEAD_BLOCK, DIM_BLOCK)
            _copy_heads(value_ptr + t64 * v_tok_stride, v_dst, v_head_stride, vc_head_stride,
                        N_HEADS, HEAD_SIZE, HEAD_BLOCK, DIM_BLOCK)


@triton.jit(do_not_specialize=["n_tokens", "num_blocks", "c_tok_stride", "pe_tok_stride", "block_stride", "slot_stride"])
def concat_and_cache_mla_kernel(
    kv_c_ptr, k_pe_ptr, cache_ptr, slot_ptr,
    n_tokens, num_blocks, c_tok_stride, pe_tok_stride, block_stride, slot_stride,
    RANK: tl.constexpr, ROPE_DIM: tl.constexpr, BLOCK_SIZE: tl.constexpr,
    RANK_BLOCK: tl.constexpr, ROPE_BLOCK: tl.constexpr,
):
    for t in range(tl.program_id(0), n_tokens, tl.num_programs(0)):
        t64 = tl.cast(t, tl.int64)
        slot = tl.load(slot_ptr + t64).to(tl.int64)
        if _slot_ok(slot, num_blocks, BLOCK_SIZE):
            # one "head" each: the latent row, then the rope row right after it
            dst = _slot_address(cache_ptr, slot, block_stride, slot_stride, BLOCK_SIZE)
            _copy_heads(kv_c_ptr + t64 * c_tok_stride, dst, 0, 0, 1, RANK, 1, RANK_BLOCK)
            _copy_heads(k_pe_ptr + t64 * pe_tok_stride, dst + RANK, 0, 0, 1, ROPE_DIM, 1, ROPE_BLOCK)


def blocks_for(heads: int, dim: int) -> tuple[int, int]:
    """(HEAD_BLOCK, DIM_BLOCK) tiling `heads` rows of `dim` elements."""
    dim_block = triton.next_power_of_2(dim)
    return min(triton.next_power_of_2(heads), max(1, MAX_TILE // dim_block)), dim_block


def reshape_and_cache_flash(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                            slot_mapping: torch.Tensor, kv_cache_dtype: str, k_scale: torch.Tensor,
                            v_scale: torch.Tensor) -> None:
    tokens = slot_mapping.shape[0]
    if tokens == 0:
        return
    _, block_size, heads, head_size = key_cache.shape
    head_block, dim_block = blocks_for(heads, head_size)
    reshape_and_cache_flash_kernel[(grid_size(key.device, tokens),)](
        key, value, key_cache, value_cache, slot_mapping,
        tokens, key_cache.shape[0], key.stride(0), key.stride(1), value.stride(0), value.stride(1),
        *key_cache.stride()[:3], *value_cache.stride()[:3],
        N_HEADS=heads, HEAD_SIZE=head_size, BLOCK_SIZE=block_size, HEAD_BLOCK=head_block, DIM_BLOCK=dim_block,
    )


def concat_and_cache_mla(kv_c: torch.Tensor, k_pe: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
                         kv_cache_dtype: str, scale: torch.Tensor) -> None:
    tokens = slot_mapping.shape[0]
    if tokens == 0:
        return
    rank, rope_dim = kv_c.shape[1], k_pe.shape[-1]
    concat_and_cache_mla_kernel[(grid_size(kv_c.device, tokens),)](
        kv_c, k_pe, kv_cache, slot_mapping,
        tokens, kv_cache.shape[0], kv_c.stride(0), k_pe.stride(0), kv_cache.stride(0), kv_cache.stride(1),
        RANK=rank, ROPE_DIM=rope_dim, BLOCK_SIZE=kv_cache.shape[1],
        RANK_BLOCK=triton.next_power_of_2(rank), ROPE_BLOCK=triton.next_power_of_2(rope_dim),
    )
