"""Rotary embedding (vLLM semantics): a vector kernel persistent over tokens, rotating query and
key heads in place.

Per token the position is read as a scalar and the cos/sin halves of its cache row are loaded
once, then shared by every query and key head. A position outside [0, cache rows) leaves the
token unrotated (a scalar compare skips it, so a bad position never reads outside the cache).
Heads are processed HEAD_BLOCK at a time as a [heads, rot_dim / 2] tile pair (x1, x2): the two
halves of the rotated part (neox), or the even and odd lanes of its contiguous [heads, rot_dim]
tile, split on chip (GPT-J). The rotated span starts ROPE_OFFSET dims into each head (a constexpr:
the offset-0 kernel is the same as without one); dims outside it are never touched. INVERSE
negates sin once per token (rotation by -theta).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ascendtile.platform import grid_size

# Pairs per (x1, x2) tile. GPT-J's on-chip even/odd split (reshape, split, join) holds more
# temporaries: bishengir-compile plans ~90-175 bytes of UB per pair for it (1024 pairs: 133-176 KB,
# 512: ~89 KB), neox well under 160 KB at 2048 pairs.
MAX_TILE = {True: 2048, False: 512}  # by is_neox


@triton.jit
def _rotate_heads(row_ptr, head_stride, cos, sin, N_HEADS: tl.constexpr, HALF: tl.constexpr,
                  IS_NEOX: tl.constexpr, HEAD_BLOCK: tl.constexpr, HALF_BLOCK: tl.constexpr):
    heads = tl.arange(0, HEAD_BLOCK)[:, None]
    d = tl.arange(0, HALF_BLOCK)[None, :]
    for h0 in range(0, N_HEADS, HEAD_BLOCK):
        head_ok = h0 + heads < N_HEADS
        head_ptr = row_ptr + (h0 + heads) * head_stride
        if IS_NEOX:
            mask = head_ok & (d < HALF)
            x1 = tl.load(head_ptr + d, mask=mask, other=0.0).to(tl.float32)
            x2 = tl.load(head_ptr + HALF + d, mask=mask, other=0.0).to(tl.float32)
            tl.store(head_ptr + d, (x1 * cos - x2 * sin).to(row_ptr.dtype.element_ty), mask=mask)
            tl.store(head_ptr + HALF + d, (x2 * cos + x1 * sin).to(row_ptr.dtype.element_ty), mask=mask)
        else:
            # Interleaved pairs: one contiguous [heads, rot_dim] tile, split into even/odd lanes on
            # chip (a stride-2 load did not lower for rot_dim / 2 = 20, and is a strided DMA anyway).
            r = tl.arange(0, 2 * HALF_BLOCK)[None, :]
            mask = head_ok & (r < 2 * HALF)
            x = tl.load(head_ptr + r, mask=mask, other=0.0).to(tl.float32)
            x1, x2 = tl.split(tl.reshape(x, (HEAD_BLOCK, HALF_BLOCK, 2)))
            out = tl.join(x1 * cos - x2 * sin, x2 * cos + x1 * sin)
            out = tl.reshape(out, (HEAD_BLOCK, 2 * HALF_BLOCK))
            tl.store(head_ptr + r, out.to(row_ptr.dtype.element_ty), mask=mask)


@triton.jit(do_not_specialize=["n_tokens", "seq_len", "max_pos", "pos_batch_stride", "q_batch_stride",
                               "q_tok_stride", "q_head_stride", "k_batch_stride", "k_tok_stride", "k_head_stride"])
def rotary_embedding_kernel(
    pos_ptr, q_ptr, k_ptr, cache_ptr,
    n_tokens, seq_len, max_pos, pos_batch_stride, q_batch_stride, q_tok_stride, q_head_stride,
    k_batch_stride, k_tok_stride, k_head_stride,
    NQ: tl.constexpr, NK: tl.constexpr, HALF: tl.constexpr, IS_NEOX: tl.constexpr, HAS_KEY: tl.constexpr,
    ROPE_OFFSET: tl.constexpr, INVERSE: tl.constexpr,
    Q_HEAD_BLOCK: tl.constexpr, K_HEAD_BLOCK: tl.constexpr, HALF_BLOCK: tl.constexpr,
):
    # Token t is (batch b, seq s) = divmod(t, seq_len): positions [B, S] and query/key [B, S, ...]
    # at any batch stride. positions [T] is one batch of seq_len = T (batch strides unused).
    d = tl.arange(0, HALF_BLOCK)[None, :]
    for t in range(tl.program_id(0), n_tokens, tl.num_programs(0)):
        t64 = tl.cast(t, tl.int64)
        b = t64 // seq_len
        s = t64 - b * seq_len
        pos = tl.load(pos_ptr + b * pos_batch_stride + s).to(tl.int64)
        if (pos >= 0) & (pos < max_pos):
            cache_row = cache_ptr + pos * (2 * HALF)
            cos = tl.load(cache_row + d, mask=d < HALF, other=0.0).to(tl.float32)
            sin = tl.load(cache_row + HALF + d, mask=d < HALF, other=0.0).to(tl.float32)
            if INVERSE:
                sin = -sin
            _rotate_heads(q_ptr + b * q_batch_stride + s * q_tok_stride + ROPE_OFFSET, q_head_stride, cos, sin, NQ,
                          HALF, IS_NEOX, Q_HEAD_BLOCK, HALF_BLOCK)
            if HAS_KEY:
                _rotate_heads(k_ptr + b * k_batch_stride + s * k_tok_stride + ROPE_OFFSET, k_head_stride, cos, sin, NK,
                              HALF, IS_NEOX, K_HEAD_BLOCK, HALF_BLOCK)


def blocks_for(heads: int, half: int, is_neox: bool) -> tuple[int, int]:
    """(HEAD_BLOCK, HALF_BLOCK) for `heads` heads rotating `half` pairs each."""
    half_block = triton.next_power_of_2(half)
    return min(triton.next_power_of_2(heads), max(1, MAX_TILE[is_neox] // half_block)), half_block


def _head_layout(x: torch.Tensor, head_size: int, token_dims: int) -> tuple[int, int, int, int]:
    """(heads, batch stride, token stride, head stride) of x = [*tokens, H*D] or [*tokens, H, D],
    tokens = [T] (batch stride 0) or [B, S]."""
    batch_stride = x.stride(0) if token_dims == 2 else 0
    if x.dim() == token_dims + 2:
        return x.shape[-2], batch_stride, x.stride(token_dims - 1), x.stride(-2)
    return x.shape[-1] // head_size, batch_stride, x.stride(token_dims - 1), head_size


def rotary_embedding(positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor | None, head_size: int,
                     cos_sin_cache: torch.Tensor, is_neox: bool, rope_dim_offset: int = 0,
                     inverse: bool = False) -> None:
    tokens = positions.numel()
    if tokens == 0:
        return
    token_dims = positions.dim()
    seq_len = positions.shape[-1]
    pos_batch = positions.stride(0) if token_dims == 2 else 0
    half = cos_sin_cache.shape[1] // 2
    nq, q_batch, q_tok, q_head = _head_layout(query, head_size, token_dims)
    nk, k_batch, k_tok, k_head = _head_layout(key, head_size, token_dims) if key is not None else (1, 0, 0, 0)
    q_block, half_block = blocks_for(nq, half, is_neox)
    k_block, _ = blocks_for(nk, half, is_neox)
    rotary_embedding_kernel[(grid_size(query.device, tokens),)](
        positions, query, key if key is not None else query, cos_sin_cache,
        tokens, seq_len, cos_sin_cache.shape[0], pos_batch, q_batch, q_tok, q_head, k_batch, k_tok, k_head,
        NQ=nq, NK=nk, HALF=half, IS_NEOX=is_neox, HAS_KEY=key is not None, ROPE_OFFSET=rope_dim_offset,
        INVERSE=inverse, Q_HEAD_BLOCK=q_block, K_HEAD_BLOCK=k_block, HALF_BLOCK=half_block,
    )
