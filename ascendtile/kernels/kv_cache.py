"""Paged KV-cache writes: reshape_and_cache_flash (K and V, [num_blocks, block_size, heads,
head_size]) and concat_and_cache_mla (latent cache, [num_blocks, block_size, rank + rope_dim]).

Vector kernels persistent over tokens. Each token's slot is read as a scalar; a slot outside
[0, num_blocks · block_size) (−1 = padding, or a bad index) skips the token: a scalar compare,
so a bad slot never writes outside the cache. Otherwise the destination is one scalar base
address (block × block stride in int64, so caches over 2^31 elements are addressed correctly)
and the token's rows are copied as contiguous [heads, head_size] tiles: no gather, no
per-element addressing.

kv_cache_dtype "int8" (QUANT, ops/_kv_quant.py): each head row is quantized on the way, one 1-D
row at a time, with the static per-head scales (QUANT_STATIC) or with the row's own scale, stored
into the scale cache [num_blocks, rows, block_size] at the slot (QUANT_DYNAMIC; rows = KV heads,
or MLA's latent and rope parts).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ascendtile.kernels._int8 import quantize_kv_dynamic, quantize_kv_static
from ascendtile.kernels._tile_io import load_tile, store_tile
from ascendtile.platform import grid_size

# Elements per copied tile (a copy holds only the loaded tile): 8192 fp16 values = 16 KB.
MAX_TILE = 8192


@triton.jit
def _slot_address(cache_ptr, slot, block_stride, slot_stride, BLOCK_SIZE: tl.constexpr):
    """Cache address of an int64 slot id: block id × block stride stays int64 (no overflow)."""
    block = slot // BLOCK_SIZE
    return cache_ptr + block * block_stride + (slot - block * BLOCK_SIZE) * slot_stride


# QUANT: how a tile is stored: plain ints on the host, tl.constexpr forms (_C) in @jit code (see
# KV_QUANT in _attention.py).
QUANT_NONE, QUANT_STATIC, QUANT_DYNAMIC = 0, 1, 2
QUANT_NONE_C, QUANT_STATIC_C, QUANT_DYNAMIC_C = (tl.constexpr(QUANT_NONE), tl.constexpr(QUANT_STATIC),
                                                 tl.constexpr(QUANT_DYNAMIC))


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
def _quantize_heads(src, dst, src_head_stride, dst_head_stride, scale, scale_stride, N_HEADS: tl.constexpr,
                    DIM: tl.constexpr, DIM_BLOCK: tl.constexpr, QUANT: tl.constexpr,
                    SCALE_ROW_STRIDE: tl.constexpr):
    """dst[h, :DIM] = int8(src[h, :DIM]), one head row at a time (_int8.quantize_kv_dynamic says
    why): QUANT_STATIC with the scales scale[h · scale_stride]; QUANT_DYNAMIC with each row's own
    scale, stored to scale[h · SCALE_ROW_STRIDE] (the slot's entries of the scale cache)."""
    d = tl.arange(0, DIM_BLOCK)
    for h in range(N_HEADS):
        # padding lanes (masked only when DIM is not a power of two) read 0: never a row's max
        x = load_tile(src + h * src_head_stride + d, d < DIM, DIM != DIM_BLOCK).to(tl.float32)
        if QUANT == QUANT_STATIC_C:
            q = quantize_kv_static(x, tl.load(scale + h * scale_stride))
        else:
            q, row_scale = quantize_kv_dynamic(x)
            tl.store(scale + h * SCALE_ROW_STRIDE, row_scale)
        store_tile(dst + h * dst_head_stride + d, q, d < DIM, DIM != DIM_BLOCK)


@triton.jit
def _write_heads(src, dst, src_head_stride, dst_head_stride, scale, scale_stride, N_HEADS: tl.constexpr,
                 DIM: tl.constexpr, HEAD_BLOCK: tl.constexpr, DIM_BLOCK: tl.constexpr, QUANT: tl.constexpr,
                 SCALE_ROW_STRIDE: tl.constexpr):
    """A token's N_HEADS rows into the cache: copied (QUANT_NONE) or quantized."""
    if QUANT == QUANT_NONE_C:
        _copy_heads(src, dst, src_head_stride, dst_head_stride, N_HEADS, DIM, HEAD_BLOCK, DIM_BLOCK)
    else:
        _quantize_heads(src, dst, src_head_stride, dst_head_stride, scale, scale_stride, N_HEADS, DIM, DIM_BLOCK,
                        QUANT, SCALE_ROW_STRIDE)


@triton.jit
def _slot_ok(slot, num_blocks, BLOCK_SIZE: tl.constexpr):
    """0 <= slot < num_blocks · BLOCK_SIZE (int64 scalars: no overflow)."""
    return (slot >= 0) & (slot < tl.cast(num_blocks, tl.int64) * BLOCK_SIZE)


@triton.jit
def _scale_slot(scale_cache_ptr, slot, ROWS: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    """Row 0's entry for an int64 slot in a contiguous [num_blocks, ROWS, BLOCK_SIZE] scale cache
    (row r's is BLOCK_SIZE · r further)."""
    block = slot // BLOCK_SIZE
    return scale_cache_ptr + block * (ROWS * BLOCK_SIZE) + (slot - block * BLOCK_SIZE)


@triton.jit
def _scale_for(scale_ptr, slot, ROWS: tl.constexpr, BLOCK_SIZE: tl.constexpr, QUANT: tl.constexpr):
    """What _write_heads' `scale` is: the slot's scale-cache entry (dynamic) or the static scales."""
    if QUANT == QUANT_DYNAMIC_C:
        return _scale_slot(scale_ptr, slot, ROWS, BLOCK_SIZE)
    return scale_ptr


@triton.jit(do_not_specialize=["n_tokens", "num_blocks", "k_tok_stride", "k_head_stride", "v_tok_stride",
                               "v_head_stride", "kc_block_stride", "kc_slot_stride", "kc_head_stride",
                               "vc_block_stride", "vc_slot_stride", "vc_head_stride", "ks_stride", "vs_stride"])
def reshape_and_cache_flash_kernel(
    key_ptr, value_ptr, key_cache_ptr, value_cache_ptr, slot_ptr, k_scale_ptr, v_scale_ptr,
    n_tokens, num_blocks, k_tok_stride, k_head_stride, v_tok_stride, v_head_stride,
    kc_block_stride, kc_slot_stride, kc_head_stride, vc_block_stride, vc_slot_stride, vc_head_stride, ks_stride, vs_stride,
    N_HEADS: tl.constexpr, HEAD_SIZE: tl.constexpr, BLOCK_SIZE: tl.constexpr,
    HEAD_BLOCK: tl.constexpr, DIM_BLOCK: tl.constexpr, QUANT: tl.constexpr,
):
    """k_scale_ptr / v_scale_ptr: the scale caches (QUANT_DYNAMIC) or the static scales, one per
    head ks_stride / vs_stride apart (0: one for all) (QUANT_STATIC); unused with QUANT_NONE."""
    for t in range(tl.program_id(0), n_tokens, tl.num_programs(0)):
        t64 = tl.cast(t, tl.int64)
        slot = tl.load(slot_ptr + t64).to(tl.int64)
        if _slot_ok(slot, num_blocks, BLOCK_SIZE):
            k_dst = _slot_address(key_cache_ptr, slot, kc_block_stride, kc_slot_stride, BLOCK_SIZE)
            v_dst = _slot_address(value_cache_ptr, slot, vc_block_stride, vc_slot_stride, BLOCK_SIZE)
            _write_heads(key_ptr + t64 * k_tok_stride, k_dst, k_head_stride, kc_head_stride,
                         _scale_for(k_scale_ptr, slot, N_HEADS, BLOCK_SIZE, QUANT), ks_stride,
                         N_HEADS, HEAD_SIZE, HEAD_BLOCK, DIM_BLOCK, QUANT, BLOCK_SIZE)
            _write_heads(value_ptr + t64 * v_tok_stride, v_dst, v_head_stride, vc_head_stride,
                         _scale_for(v_scale_ptr, slot, N_HEADS, BLOCK_SIZE, QUANT), vs_stride,
                         N_HEADS, HEAD_SIZE, HEAD_BLOCK, DIM_BLOCK, QUANT, BLOCK_SIZE)


@triton.jit(do_not_specialize=["n_tokens", "num_blocks", "c_tok_stride", "pe_tok_stride", "block_stride", "slot_stride"])
def concat_and_cache_mla_kernel(
    kv_c_ptr, k_pe_ptr, cache_ptr, slot_ptr, scale_ptr,
    n_tokens, num_blocks, c_tok_stride, pe_tok_stride, block_stride, slot_stride,
    RANK: tl.constexpr, ROPE_DIM: tl.constexpr, BLOCK_SIZE: tl.constexpr,
    RANK_BLOCK: tl.constexpr, ROPE_BLOCK: tl.constexpr, QUANT: tl.constexpr,
):
    """scale_ptr: the [num_blocks, 2, BLOCK_SIZE] scale cache (QUANT_DYNAMIC: latent row 0, rope
    row 1) or the one static scale of both parts (QUANT_STATIC); unused with QUANT_NONE."""
    for t in range(tl.program_id(0), n_tokens, tl.num_programs(0)):
        t64 = tl.cast(t, tl.int64)
        slot = tl.load(slot_ptr + t64).to(tl.int64)
        if _slot_ok(slot, num_blocks, BLOCK_SIZE):
            # one "head" each: the latent row, then the rope row right after it
            dst = _slot_address(cache_ptr, slot, block_stride, slot_stride, BLOCK_SIZE)
            scale = _scale_for(scale_ptr, slot, 2, BLOCK_SIZE, QUANT)
            _write_heads(kv_c_ptr + t64 * c_tok_stride, dst, 0, 0, scale, 0, 1, RANK, 1, RANK_BLOCK, QUANT, BLOCK_SIZE)
            if QUANT == QUANT_DYNAMIC_C:
                scale += BLOCK_SIZE  # the rope part's row of the scale cache
            _write_heads(k_pe_ptr + t64 * pe_tok_stride, dst + RANK, 0, 0, scale, 0, 1, ROPE_DIM, 1, ROPE_BLOCK,
                         QUANT, BLOCK_SIZE)


def blocks_for(heads: int, dim: int) -> tuple[int, int]:
    """(HEAD_BLOCK, DIM_BLOCK) tiling `heads` rows of `dim` elements."""
    dim_block = triton.next_power_of_2(dim)
    return min(triton.next_power_of_2(heads), max(1, MAX_TILE // dim_block)), dim_block


def quant_mode(kv_cache_dtype: str, scale_cache: torch.Tensor | None) -> int:
    """The QUANT constexpr of a write: none ("auto"), dynamic (scale caches given) or static."""
    if kv_cache_dtype != "int8":
        return QUANT_NONE
    return QUANT_STATIC if scale_cache is None else QUANT_DYNAMIC


def reshape_and_cache_flash(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                            slot_mapping: torch.Tensor, kv_cache_dtype: str, k_scale: torch.Tensor,
                            v_scale: torch.Tensor, k_scale_cache: torch.Tensor | None = None,
                            v_scale_cache: torch.Tensor | None = None) -> None:
    tokens = slot_mapping.shape[0]
    if tokens == 0:
        return
    _, block_size, heads, head_size = key_cache.shape
    head_block, dim_block = blocks_for(heads, head_size)
    quant = quant_mode(kv_cache_dtype, k_scale_cache)
    k_scales, v_scales = (k_scale_cache, v_scale_cache) if quant == QUANT_DYNAMIC else (k_scale, v_scale)
    reshape_and_cache_flash_kernel[(grid_size(key.device, tokens),)](
        key, value, key_cache, value_cache, slot_mapping, k_scales, v_scales,
        tokens, key_cache.shape[0], key.stride(0), key.stride(1), value.stride(0), value.stride(1),
        *key_cache.stride()[:3], *value_cache.stride()[:3],
        0 if k_scale.numel() == 1 else 1, 0 if v_scale.numel() == 1 else 1,  # static: per head, or one for all
        N_HEADS=heads, HEAD_SIZE=head_size, BLOCK_SIZE=block_size, HEAD_BLOCK=head_block, DIM_BLOCK=dim_block,
        QUANT=quant,
    )


def concat_and_cache_mla(kv_c: torch.Tensor, k_pe: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
                         kv_cache_dtype: str, scale: torch.Tensor, scale_cache: torch.Tensor | None = None) -> None:
    tokens = slot_mapping.shape[0]
    if tokens == 0:
        return
    rank, rope_dim = kv_c.shape[1], k_pe.shape[-1]
    quant = quant_mode(kv_cache_dtype, scale_cache)
    concat_and_cache_mla_kernel[(grid_size(kv_c.device, tokens),)](
        kv_c, k_pe, kv_cache, slot_mapping, scale_cache if quant == QUANT_DYNAMIC else scale,
        tokens, kv_cache.shape[0], kv_c.stride(0), k_pe.stride(0), kv_cache.stride(0), kv_cache.stride(1),
        RANK=rank, ROPE_DIM=rope_dim, BLOCK_SIZE=kv_cache.shape[1],
        RANK_BLOCK=triton.next_power_of_2(rank), ROPE_BLOCK=triton.next_power_of_2(rope_dim), QUANT=quant,
    )
