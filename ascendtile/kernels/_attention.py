"""Shared @triton.jit pieces of the attention kernels (paged decode, unified, dense varlen; MLA
may import them too). Nothing here is launched on its own.

Conventions every helper follows:
- a query tile is [M, D_PAD] rows (M >= 16, the smallest tl.dot operand), in the storage dtype;
- the running state of one tile of query rows is (acc [M, D_PAD] fp32, unnormalised output;
  m [M] fp32, running max of the scaled scores, -inf until a row has seen a visible key;
  l [M] fp32, running softmax denominator) — `init_state` / `finish` create and close it;
- K/V are read as whole contiguous [TILE_N, D_PAD] tiles from a scalar row base (a scalar block id
  for the paged cache), never gathered row by row, so they lower to block copies on Ascend;
- visibility of key j to a query at absolute position p: j < hi (the KV range end), its block id
  in [0, num_blocks) (paged: an id outside, -1 included, hides its keys and is never read),
  causal j <= p, sliding window w > 0: p - w < j (HF / vLLM convention);
- an int8 paged cache (KV_QUANT, ops/_kv_quant.py) is never dequantized as a tile: its int8 tiles
  are converted to the query's dtype (exact: |v| <= 127) and the scales applied to the [M, N]
  products instead, which is exact algebra and cheaper than scaling [N, D] tiles (N keys, D >= M
  dims). Dynamic (per token and head): the scores' column j times K's scale of key j, and P's
  column j times V's scale of key j before the P·V dot (P·diag(s)·V = P·(diag(s)·V)). Static
  (per head): K's scale folded into the softmax scale, V's applied to the accumulator after the
  loop. The running max and denominator see the exact scores, so nothing else changes.
"""
import os

import torch
import triton
import triton.language as tl

from ascendtile.kernels._reduce import fast_max


@triton.jit
def init_state(M: tl.constexpr, D_PAD: tl.constexpr):
    acc = tl.zeros([M, D_PAD], dtype=tl.float32)
    m_i = tl.full([M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([M], dtype=tl.float32)
    return acc, m_i, l_i


@triton.jit
def finish(acc, l_i):
    """acc / l per row; rows that saw no visible key (l == 0, acc == 0) give 0, not NaN."""
    l_safe = tl.where(l_i > 0.0, l_i, 1.0)
    return acc / l_safe[:, None]


@triton.jit
def softcap_tanh(s, softcap):
    """softcap·tanh(s / softcap), with tanh(x) = 1 - 2 / (exp(2x) + 1): saturates to ±1 for large
    |x| instead of inf / inf, and needs no libdevice (portable across Ascend, CUDA, interpreter)."""
    return softcap * (1.0 - 2.0 / (tl.exp(2.0 * s / softcap) + 1.0))


def upcast_dot(dtype: torch.dtype) -> bool:
    """The value of the kernels' UPCAST_DOT constexpr: True only under the Triton 3.2 interpreter
    with bf16, whose tl.dot multiplies the raw uint16 storage of bf16 operands (garbage). The
    operands are then cast to fp32 after rounding to bf16, so the products are the same; compiled
    kernels (and the lowering gate) always take the bf16 dot."""
    return dtype == torch.bfloat16 and os.environ.get("TRITON_INTERPRET", "0") == "1"


@triton.jit
def as_dot_operand(tile, like, UPCAST_DOT: tl.constexpr):
    """A K/V tile in the dtype of `like` (the query tile) for the dots: an int8 cache's tile is
    exact in fp16/bf16/fp32. The 3.2 interpreter converts int8 straight to bf16 wrongly (NaN and
    denormals), so under it (UPCAST_DOT) the conversion goes through fp32; a float tile passes as is."""
    if UPCAST_DOT:
        return tile.to(tl.float32).to(like.dtype)
    return tile.to(like.dtype)


@triton.jit
def dot(a, b, UPCAST_DOT: tl.constexpr):
    """a @ b accumulated in fp32 (see upcast_dot)."""
    if UPCAST_DOT:
        return tl.dot(a.to(tl.float32), b.to(tl.float32))
    return tl.dot(a, b)


# KV_QUANT: how the paged cache stores K and V. The host passes and names the plain ints; @jit code
# compares with their tl.constexpr forms (_C): upstream triton lets a kernel read no other module
# global (triton-ascend 3.2 and the interpreter accept plain ones; a GPU run found it).
KV_FLOAT, KV_INT8_STATIC, KV_INT8_DYNAMIC = 0, 1, 2
KV_INT8_STATIC_C, KV_INT8_DYNAMIC_C = tl.constexpr(KV_INT8_STATIC), tl.constexpr(KV_INT8_DYNAMIC)


@triton.jit
def attend_tile(q, k, v, acc, m_i, l_i, visible, scale, softcap, k_scales, v_scales, USE_SOFTCAP: tl.constexpr,
                UPCAST_DOT: tl.constexpr, PER_KEY_SCALES: tl.constexpr):
    """One online-softmax step over a KV tile: q [M, D_PAD], k/v [N, D_PAD] (q's dtype),
    visible [M, N]; PER_KEY_SCALES: k_scales / v_scales [N] fp32 scale key j's score and
    probability (an int8 cache's dynamic scales; unused otherwise). Returns the updated (acc, m, l)."""
    s = dot(q, tl.trans(k), UPCAST_DOT) * scale
    if PER_KEY_SCALES:
        s = s * k_scales[None, :]
    if USE_SOFTCAP:
        s = softcap_tanh(s, softcap)
    s = tl.where(visible, s, float("-inf"))
    m_new = tl.maximum(m_i, fast_max(s, 1))
    # Rows with no visible key so far keep m = -inf: subtract 0 instead so exp() gives 0, not NaN.
    m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp(m_i - m_ref)
    p = tl.exp(s - m_ref[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    if PER_KEY_SCALES:
        p = p * v_scales[None, :]
    acc = acc * alpha[:, None] + dot(p.to(v.dtype), v, UPCAST_DOT)
    return acc, m_new, l_i


@triton.jit
def work_coords(work, n_inner, NUM_KV_HEADS: tl.constexpr):
    """(sequence, KV head, inner index) of flat work item `work`, laid out [sequence][KV head][inner]
    (inner: a KV split of paged decode)."""
    return work // (n_inner * NUM_KV_HEADS), (work // n_inner) % NUM_KV_HEADS, work % n_inner


@triton.jit
def group_rows(base, t0, n_t, stride_t, h0, n_h, stride_h, BLOCK_T: tl.constexpr, H_PAD: tl.constexpr,
               D: tl.constexpr, D_PAD: tl.constexpr):
    """Pointers and mask of the [BLOCK_T, H_PAD, D_PAD] block of a [tokens, heads, D] tensor at
    tokens t0 + [0, n_t), heads h0 + [0, n_h): an affine 3-D block (so it lowers to row copies,
    not per-element ones). Flatten with tl.reshape to the [BLOCK_T·H_PAD, D_PAD] rows of a query
    tile: row r = token r // H_PAD, head r % H_PAD."""
    offs_t = tl.arange(0, BLOCK_T)
    offs_h = tl.arange(0, H_PAD)
    offs_d = tl.arange(0, D_PAD)
    ptrs = (base + (t0 + offs_t)[:, None, None] * stride_t + (h0 + offs_h)[None, :, None] * stride_h
            + offs_d[None, None, :])
    mask = (offs_t < n_t)[:, None, None] & (offs_h < n_h)[None, :, None] & (offs_d < D)[None, None, :]
    return ptrs, mask


@triton.jit
def load_kv_tile(base, offs_n, offs_d, stride_tok, n_valid, D: tl.constexpr, D_PAD: tl.constexpr):
    """[TILE_N, D_PAD] rows base + i·stride_tok; rows >= n_valid and dims >= D read as 0 (so NaN
    in unused cache slots never reaches the dot products)."""
    ptrs = base + offs_n[:, None] * stride_tok + offs_d[None, :]
    if D == D_PAD:
        return tl.load(ptrs, mask=offs_n[:, None] < n_valid, other=0.0)
    return tl.load(ptrs, mask=(offs_n[:, None] < n_valid) & (offs_d[None, :] < D), other=0.0)


@triton.jit
def attend_kv_range(
    q, acc, m_i, l_i, q_pos, row_ok,
    k_base, v_base, table_row, num_blocks, lo, hi,
    stride_blk, stride_tok, scale, softcap, window, ks_base, vs_base,
    PAGED: tl.constexpr, BLOCK_SIZE: tl.constexpr, TILE_N: tl.constexpr, D: tl.constexpr, D_PAD: tl.constexpr,
    CAUSAL: tl.constexpr, USE_SOFTCAP: tl.constexpr, USE_WINDOW: tl.constexpr, UPCAST_DOT: tl.constexpr,
    KV_QUANT: tl.constexpr, NUM_KV_HEADS: tl.constexpr,
):
    """The shared KV loop: attend query rows (absolute positions q_pos [M], row_ok [M]) to keys
    [lo, hi) of one sequence and KV head, TILE_N keys at a time from a TILE_N-aligned start.

    PAGED: k_base/v_base point at the cache's KV head (cache + head·stride_head), table_row at the
    sequence's block-table row; TILE_N divides BLOCK_SIZE so a tile never straddles two blocks and
    its rows are contiguous in one block (row base = block id · stride_blk). A block id outside
    [0, num_blocks) ends the tile's range at its start: its keys read as 0 and are not visible.
    Dense: k_base/v_base point at the sequence's first key of the head; row base = position ·
    stride_tok (num_blocks unused).

    KV_QUANT (PAGED only; see the module doc): KV_INT8_STATIC: ks_base / vs_base point at the KV
    head's static scales; KV_INT8_DYNAMIC: at the head's row of the contiguous scale caches
    [num_blocks, NUM_KV_HEADS, BLOCK_SIZE] (a tile's scales are one contiguous run of that row).
    """
    offs_n = tl.arange(0, TILE_N)
    offs_d = tl.arange(0, D_PAD)
    # Visibility is decided on fp32 positions (exact below 2^24): integer vector compares are
    # scalar code on A2/A3, float ones run on the vector unit.
    offs_n_f = offs_n.to(tl.float32)
    q_pos_f = q_pos.to(tl.float32)[:, None]
    qk_scale = scale
    if KV_QUANT == KV_INT8_STATIC_C:
        qk_scale = scale * tl.load(ks_base)
    for pos0 in range((lo // TILE_N) * TILE_N, hi, TILE_N):
        tile_hi = hi
        if PAGED:
            block = tl.load(table_row + pos0 // BLOCK_SIZE)
            # A bad block id (scalar compares) empties the tile instead of reading outside the cache.
            block_ok = (block >= 0) & (block < num_blocks)
            tile_hi = tl.where(block_ok, hi, pos0)
            row = tl.cast(tl.where(block_ok, block, 0), tl.int64) * stride_blk + (pos0 % BLOCK_SIZE) * stride_tok
        else:
            row = tl.cast(pos0, tl.int64) * stride_tok
        k = as_dot_operand(load_kv_tile(k_base + row, offs_n, offs_d, stride_tok, tile_hi - pos0, D, D_PAD), q, UPCAST_DOT)
        v = as_dot_operand(load_kv_tile(v_base + row, offs_n, offs_d, stride_tok, tile_hi - pos0, D, D_PAD), q, UPCAST_DOT)
        k_scales = 1.0  # unused unless dynamic
        v_scales = 1.0
        if KV_QUANT == KV_INT8_DYNAMIC_C:
            # the tile's keys' scales: one contiguous run of the head's scale row (0 past tile_hi,
            # where the slots may hold NaN)
            s_row = tl.cast(tl.where(block_ok, block, 0), tl.int64) * (NUM_KV_HEADS * BLOCK_SIZE) + pos0 % BLOCK_SIZE
            in_tile = offs_n_f < tl.cast(tile_hi - pos0, tl.float32)
            k_scales = tl.load(ks_base + s_row + offs_n, mask=in_tile, other=0.0)
            v_scales = tl.load(vs_base + s_row + offs_n, mask=in_tile, other=0.0)
        key_pos = (tl.cast(pos0, tl.float32) + offs_n_f)[None, :]
        visible = row_ok[:, None] & (key_pos < tl.cast(tile_hi, tl.float32))
        if CAUSAL:
            visible = visible & (key_pos <= q_pos_f)
        if USE_WINDOW:
            visible = visible & (key_pos > q_pos_f - tl.cast(window, tl.float32))
        acc, m_i, l_i = attend_tile(q, k, v, acc, m_i, l_i, visible, qk_scale, softcap, k_scales, v_scales,
                                    USE_SOFTCAP, UPCAST_DOT, KV_QUANT == KV_INT8_DYNAMIC_C)
    if KV_QUANT == KV_INT8_STATIC_C:
        acc = acc * tl.load(vs_base)
    return acc, m_i, l_i


@triton.jit
def scale_bases(ks_ptr, vs_ptr, kv_head, ks_stride, vs_stride, BLOCK_SIZE: tl.constexpr, KV_QUANT: tl.constexpr):
    """attend_kv_range's ks_base / vs_base for KV head kv_head: its row of the [num_blocks, KVH,
    BLOCK_SIZE] scale caches (dynamic), or its static scales, one per head ks_stride / vs_stride
    apart (0: one for all heads)."""
    if KV_QUANT == KV_INT8_DYNAMIC_C:
        return ks_ptr + kv_head * BLOCK_SIZE, vs_ptr + kv_head * BLOCK_SIZE
    return ks_ptr + kv_head * ks_stride, vs_ptr + kv_head * vs_stride


def kv_scale_args(kv_cache_dtype: str, k_scale: torch.Tensor | None, v_scale: torch.Tensor | None,
                  dummy: torch.Tensor) -> dict:
    """The launch arguments an attention kernel reads the cache's scales with: ks_ptr / vs_ptr
    (`dummy`, never read, for a float cache), ks_stride / vs_stride (static per-head scales: 1, one
    for all heads: 0) and the KV_QUANT constexpr."""
    if kv_cache_dtype != "int8":
        return dict(ks_ptr=dummy, vs_ptr=dummy, ks_stride=0, vs_stride=0, KV_QUANT=KV_FLOAT)
    if k_scale.dim() == 3:
        return dict(ks_ptr=k_scale, vs_ptr=v_scale, ks_stride=0, vs_stride=0, KV_QUANT=KV_INT8_DYNAMIC)
    return dict(ks_ptr=k_scale, vs_ptr=v_scale, ks_stride=int(k_scale.numel() > 1), vs_stride=int(v_scale.numel() > 1),
                KV_QUANT=KV_INT8_STATIC)


def check_query_tile(rows: int, head_pad: int) -> None:
    """The query rows of one work item (a whole GQA group at least) with their fp32 accumulator
    must fit on chip: up to 64 rows of <= 128 dims or 16 rows of 256 (lowering gate, 160 KB of
    UB, bf16 with softcap and window: 64 MQA rows × 128 dims plan 147 KB with 64-key tiles, 128
    rows overflow the 192 KB; 32 rows × 256 dims plan 189-191 KB). Larger groups would need a
    group split; no served model needs it."""
    limit = 64 * 128 if head_pad <= 128 else 16 * 256
    if rows * head_pad > limit:
        raise ValueError(f"query: a tile of {rows} query rows (the GQA group, padded) × head size {head_pad} exceeds "
                         f"the attention kernels' on-chip limit of {limit} elements; use the reference path")


def tile_n(block_size: int, rows: int, head_pad: int = 0, kv_int8: bool = False) -> int:
    """Keys per KV tile for a query tile of `rows` rows: the largest power of two dividing the
    block size (a tile never straddles two blocks), at most 128 keys for 16 rows and 64 for 32-64
    rows. UB holds the [rows, TILE_N] fp32 scores and their softmax temporaries (K and V go to
    L1), so rows × keys bounds it. Lowering gate, bf16 with softcap and window, 160 KB budget:
    unified 16 rows × 256 dims × 128 keys 154 KB, 32 × 128 × 64 147 KB (× 128 keys: 183 KB),
    64 MQA rows × 128 × 64 147 KB; paged decode 16 rows × 128 keys 46-62 KB, 64 rows × 64
    keys 120 KB (× 128: 173 KB).

    An int8 cache (kv_int8) also converts its int8 K and V tiles to the query's dtype on the
    vector cores, buffers that grow with keys × head_pad (bf16 most: int8 → fp32 → bf16): half
    the keys, and at most 4096 // head_pad (16 rows × 256 dims × 32 keys planned 162 KB, × 16
    keys 124 KB; 32 rows × 128 dims × 64 keys 181 KB, × 32 keys 156 KB)."""
    keys = 128 if rows <= 16 else 64
    if kv_int8:
        keys = max(16, min(keys // 2, 4096 // head_pad))
    return min(block_size & -block_size, keys)
