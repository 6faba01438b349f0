"""W4A16 linear (w4a16_linear): activations [M, K] (fp16/bf16/fp32) times group-wise 4-bit weights
in the packed layout of ops/reference/w4a16.py (uint8 [N, K/2], fp32 scale and min per group).

One mix kernel, persistent over [BLOCK_M, BLOCK_N] output tiles. Per K step the vector core loads
the [BLOCK_N, BLOCK_K/2] byte tile (as int8: Ascend has no unsigned loads), splits each byte into
its low (input k = 2j) and high (k = 2j + 1) nibble and dequantizes both halves,
w = q·scale + min in fp32 (the reference's exact weight). Rather than interleaving the two
halves back into K order (join + reshape + transpose of the weight tile: bishengir-compile
aborts on it), the activation tile is split into its even and odd columns (a reshape + split of
the smaller tile) and the cube runs two dots, x_even·w_evenᵀ + x_odd·w_oddᵀ, into one fp32
accumulator; the epilogue adds the bias and rounds once to the input dtype.

The dot runs in the input's dtype: the fp32 weight is rounded once to fp16/bf16 (as vLLM's Marlin
and CPU WNA16 kernels dequantize into the activation dtype), so the cube runs at its native rate
with half the L1/L0 footprint of an fp32 dot. The cost is that one rounding per weight (relative
2^-11 fp16, 2^-9 bf16); tests/tolerances.py bounds it. fp32 inputs take an fp32 dot.

Group parameters are applied per weight element, so a K step may hold several groups or lie
inside one: BLOCK_K is a multiple of group_size (GROUPS_PER_BLOCK groups, broadcast by a
[BLOCK_N, GROUPS_PER_BLOCK, group] reshape) or divides it (one scale column per step). Either
way no step straddles a group boundary, and a step loads each scale once, never per element.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ascendtile.kernels._attention import dot, upcast_dot
from ascendtile.platform import core_counts, grid_size

# What bishengir-compile plans (gate, bf16, the most groups per K step): UB grows with the weights
# dequantized per step, BLOCK_N x BLOCK_K (~13 bytes each: the int32 bytes, both fp32 nibble
# halves, their scaled copies and the casts, double-buffered), plus the activation tile. 16 rows:
# 32x128 59 KB, 64x128 109 KB, 128x64 114 KB (64x256: 176 KB); 64 rows: 64x128 145 KB, 128x64
# 150 KB; 128 rows: 32x128 129 KB, 64x64 115 KB (64x128 176 KB, 128x64 180 KB). Hence 8192
# weights per step up to 64 rows, 4096 at 128; fp32 activations (an fp32 dot) half of that
# (64x64 at 64 rows: 115 KB).
BLOCK_KS = (128, 64, 32)
BLOCK_NS = (32, 64, 128)
BLOCK_MS = (16, 32, 64, 128)
STEP_WEIGHTS = {16: 8192, 32: 8192, 64: 8192, 128: 4096}  # by BLOCK_M, for 16-bit activations
# A tile's fixed cost (its accumulator hand-off, filling the K pipeline) in output-equivalents: a
# modelling choice, as in scaled_mm.py (no NPU here). It makes the tile shape with fewer waves
# win unless a smaller one balances the cores much better.
TILE_OVERHEAD = 16 * 128


@triton.jit
def _dequantized_halves(qw_tile, scale_tile, min_tile, rn, rk2, col_mask, k0, K, n_groups, group_size,
                        BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUPS_PER_BLOCK: tl.constexpr):
    """The K step at k0 as two fp32 [BLOCK_N, BLOCK_K/2] weight tiles, q·scale + min of the even
    inputs (low nibbles) and of the odd ones (high nibbles)."""
    b = tl.load(qw_tile + rn[:, None] * (K // 2) + k0 // 2 + rk2[None, :],
                mask=col_mask[:, None] & (rk2 < (K - k0) // 2)[None, :], other=0).to(tl.int32)
    # int8 bytes: the sign extension sets the bits above 7; & 15 after the shift drops them.
    lo = (b & 15).to(tl.float32)
    hi = ((b >> 4) & 15).to(tl.float32)
    g = k0 // group_size + tl.arange(0, GROUPS_PER_BLOCK)
    offs = rn[:, None] * n_groups + g[None, :]
    g_mask = col_mask[:, None] & (g < n_groups)[None, :]
    scale = tl.load(scale_tile + offs, mask=g_mask, other=0.0)[:, :, None]
    shift = tl.load(min_tile + offs, mask=g_mask, other=0.0)[:, :, None]
    # A byte's two inputs share its group: each group is BLOCK_K / 2 / GROUPS_PER_BLOCK bytes.
    grouped: tl.constexpr = (BLOCK_N, GROUPS_PER_BLOCK, BLOCK_K // 2 // GROUPS_PER_BLOCK)
    w_even = tl.reshape(tl.reshape(lo, grouped) * scale + shift, (BLOCK_N, BLOCK_K // 2))
    w_odd = tl.reshape(tl.reshape(hi, grouped) * scale + shift, (BLOCK_N, BLOCK_K // 2))
    return w_even, w_odd


@triton.jit(do_not_specialize=["M", "N", "K", "n_groups", "group_size", "stride_xm", "stride_om"])
def w4a16_linear_kernel(
    x_ptr, qw_ptr, scale_ptr, min_ptr, bias_ptr, out_ptr,
    M, N, K, n_groups, group_size, stride_xm, stride_om,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUPS_PER_BLOCK: tl.constexpr,
    HAS_BIAS: tl.constexpr, UPCAST_DOT: tl.constexpr,
):
    rm = tl.arange(0, BLOCK_M)
    rn = tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    rk2 = tl.arange(0, BLOCK_K // 2)
    tiles_n = tl.cdiv(N, BLOCK_N)
    for tile in range(tl.program_id(0), tl.cdiv(M, BLOCK_M) * tiles_n, tl.num_programs(0)):
        row0 = (tile // tiles_n) * BLOCK_M
        col0 = (tile % tiles_n) * BLOCK_N
        row_mask = rm < M - row0
        col_mask = rn < N - col0
        x_tile = x_ptr + tl.cast(row0, tl.int64) * stride_xm
        qw_tile = qw_ptr + tl.cast(col0, tl.int64) * (K // 2)
        scale_tile = scale_ptr + tl.cast(col0, tl.int64) * n_groups
        min_tile = min_ptr + tl.cast(col0, tl.int64) * n_groups
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            x = tl.load(x_tile + k0 + rm[:, None] * stride_xm + rk[None, :],
                        mask=row_mask[:, None] & (rk < K - k0)[None, :], other=0.0)
            # The activation tile's even and odd columns, split on chip, meet the low- and
            # high-nibble weights in two dots: the (larger) weight tile is never interleaved.
            x_even, x_odd = tl.split(tl.reshape(x, (BLOCK_M, BLOCK_K // 2, 2)))
            w_even, w_odd = _dequantized_halves(qw_tile, scale_tile, min_tile, rn, rk2, col_mask, k0, K, n_groups,
                                                group_size, BLOCK_N, BLOCK_K, GROUPS_PER_BLOCK)
            acc += dot(x_even, tl.trans(w_even.to(x_ptr.dtype.element_ty)), UPCAST_DOT)
            acc += dot(x_odd, tl.trans(w_odd.to(x_ptr.dtype.element_ty)), UPCAST_DOT)
        if HAS_BIAS:
            acc = acc + tl.load(bias_ptr + col0 + rn, mask=col_mask, other=0.0).to(tl.float32)[None, :]
        out_tile = out_ptr + tl.cast(row0, tl.int64) * stride_om + col0
        tl.store(out_tile + rm[:, None] * stride_om + rn[None, :], acc.to(out_ptr.dtype.element_ty),
                 mask=row_mask[:, None] & col_mask[None, :])


def max_block_k(block_m: int, block_n: int, dtype: torch.dtype) -> int:
    weights = STEP_WEIGHTS[block_m] // (2 if dtype == torch.float32 else 1)
    return min(BLOCK_KS[0], weights // block_n)


def block_k_for(block_m: int, block_n: int, k: int, group_size: int, dtype: torch.dtype) -> int:
    """The largest K step of BLOCK_KS up to max_block_k that is a multiple of group_size or
    divides it (no step straddles a group), or any when the one group is the whole row (per
    channel)."""
    return next(bk for bk in BLOCK_KS if bk <= max_block_k(block_m, block_n, dtype)
                and (bk % group_size == 0 or group_size % bk == 0 or group_size == k))


def groups_per_block(block_k: int, group_size: int) -> int:
    return max(1, block_k // group_size)


def block_m_for(m: int) -> int:
    """Rows per tile: M padded to the 16-row dot tile, up to 128."""
    return min(BLOCK_MS[-1], max(BLOCK_MS[0], triton.next_power_of_2(m)))


def tiles_for(m: int, n: int, k: int, group_size: int, dtype: torch.dtype, cube_cores: int) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_K): the BLOCK_N with the least work on the busiest cube core,
    waves x (tile outputs + TILE_OVERHEAD), the larger on a tie. E.g. one token of N=576 on 20
    cores: 32 (18 tiles, one wave) rather than 64 (9 busy cores); N=3072: 128 (24 tiles, two
    waves) rather than 64 (three)."""
    block_m = block_m_for(m)

    def busiest_core(block_n: int) -> tuple[int, int]:
        tiles = triton.cdiv(m, block_m) * triton.cdiv(n, block_n)
        return triton.cdiv(tiles, cube_cores) * (block_m * block_n + TILE_OVERHEAD), -block_n

    block_n = min((bn for bn in BLOCK_NS if max_block_k(block_m, bn, dtype) >= BLOCK_KS[-1]), key=busiest_core)
    return block_m, block_n, block_k_for(block_m, block_n, k, group_size, dtype)


def w4a16_linear(input: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor,
                 group_size: int, bias: torch.Tensor | None) -> torch.Tensor:
    x = input.reshape(-1, input.shape[-1])
    m, k = x.shape
    n = qweight.shape[0]
    out = torch.empty((m, n), dtype=input.dtype, device=input.device)
    if m > 0 and n > 0:
        block_m, block_n, block_k = tiles_for(m, n, k, group_size, input.dtype, core_counts(x.device)["cube"])
        tiles = triton.cdiv(m, block_m) * triton.cdiv(n, block_n)
        w4a16_linear_kernel[(grid_size(x.device, tiles, uses_dot=True),)](
            x, qweight.view(torch.int8), scales, mins, bias if bias is not None else scales, out,
            m, n, k, scales.shape[1], group_size, x.stride(0), out.stride(0),
            BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUPS_PER_BLOCK=groups_per_block(block_k, group_size),
            HAS_BIAS=bias is not None, UPCAST_DOT=upcast_dot(input.dtype),
        )
    return out.view(*input.shape[:-1], n)
