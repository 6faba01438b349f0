"""int8 GEMM with scaled epilogue (scaled_mm) and the W8A8 linear (w8a8_linear).

One mix kernel, persistent over [BLOCK_M, BLOCK_N] output tiles: int8 x int8 tl.dot accumulating
in int32, then out = (acc * a_scale) * b_scale + bias in fp32.

w8a8_linear quantizes the activations with the vector kernel of quant.py, then runs this GEMM.
A quantizing prologue inside the GEMM (one launch, no int8 copy of the activations) cost more
per tile than it saved (bishengir-compile's plan: 32-41 pipe barriers and 18 cube<->vector syncs
per tile against 8 and 12, a row absmax redone for every N tile, and fp32 temporaries that kept
the tiles at 16-64 x 64-128 x 32-64); docs/ascend-kernel-rules.md has the numbers.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ascendtile.kernels.quant import dynamic_scaled_int8_quant, static_scaled_int8_quant
from ascendtile.platform import core_counts, grid_size

# bishengir-compile's plans at BLOCK_K 256 (bf16 out, bias, per-row/column scales): L1 64-192 KB
# (of 512), L0C up to 128 KB at 128x256 (all of it), UB 3-69 KB with a K-contiguous b. A
# row-major b is moved through the vector core: UB 35-133 KB up to 16k outputs per tile, 192 KB
# at 128x256 (over the gate's 160 KB).
BLOCK_K = 256
BLOCK_NS = (64, 128, 256)
MAX_TILE_OUTPUTS = {True: 128 * 256, False: 64 * 256}  # by b_k_contiguous
# A tile's fixed cost (its cube->vector hand-off of the accumulator, filling the K pipeline) in
# output-equivalents: a modelling choice, not a measurement (no NPU here). It makes a tile shape
# with fewer waves win unless a smaller tile balances the cores much better.
TILE_OVERHEAD = 16 * 128


@triton.jit
def _load_b(b_tile, rk, rn, stride_bk, stride_bn, col_mask, k_left, B_K_CONTIGUOUS: tl.constexpr):
    """[BLOCK_K, BLOCK_N] int8 tile of b. A K-contiguous b (an nn.Linear weight [N, K] seen as
    b = weight.t()) is read as contiguous [BLOCK_N, BLOCK_K] rows and transposed on chip."""
    k_mask = rk < k_left
    if B_K_CONTIGUOUS:
        bt = tl.load(b_tile + rn[:, None] * stride_bn + rk[None, :], mask=col_mask[:, None] & k_mask[None, :], other=0)
        return tl.trans(bt)
    return tl.load(b_tile + rk[:, None] * stride_bk + rn[None, :] * stride_bn, mask=k_mask[:, None] & col_mask[None, :], other=0)


@triton.jit(do_not_specialize=["M", "N", "K", "stride_am", "stride_bk", "stride_bn", "stride_om"])
def scaled_mm_kernel(
    a_ptr, b_ptr, out_ptr, a_scale_ptr, b_scale_ptr, bias_ptr,
    M, N, K, stride_am, stride_bk, stride_bn, stride_om,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    A_PER_ROW: tl.constexpr, B_PER_COL: tl.constexpr, HAS_BIAS: tl.constexpr, B_K_CONTIGUOUS: tl.constexpr,
):
    rm = tl.arange(0, BLOCK_M)
    rn = tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    tiles_n = tl.cdiv(N, BLOCK_N)
    for tile in range(tl.program_id(0), tl.cdiv(M, BLOCK_M) * tiles_n, tl.num_programs(0)):
        row0 = (tile // tiles_n) * BLOCK_M
        col0 = (tile % tiles_n) * BLOCK_N
        row_mask = rm < M - row0
        col_mask = rn < N - col0
        a_tile = a_ptr + tl.cast(row0, tl.int64) * stride_am
        b_tile = b_ptr + tl.cast(col0, tl.int64) * stride_bn
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.int32)
        for k0 in range(0, K, BLOCK_K):
            a = tl.load(a_tile + k0 + rm[:, None] * stride_am + rk[None, :],
                        mask=row_mask[:, None] & (rk < K - k0)[None, :], other=0)
            b = _load_b(b_tile + tl.cast(k0, tl.int64) * stride_bk, rk, rn, stride_bk, stride_bn, col_mask, K - k0, B_K_CONTIGUOUS)
            acc = tl.dot(a, b, acc, out_dtype=tl.int32)  # upstream triton defaults int8 dots to fp32 results
        y = acc.to(tl.float32)
        if A_PER_ROW:
            y = y * tl.load(a_scale_ptr + row0 + rm, mask=row_mask, other=0.0)[:, None]
        else:
            y = y * tl.load(a_scale_ptr)
        if B_PER_COL:
            y = y * tl.load(b_scale_ptr + col0 + rn, mask=col_mask, other=0.0)[None, :]
        else:
            y = y * tl.load(b_scale_ptr)
        if HAS_BIAS:
            y = y + tl.load(bias_ptr + col0 + rn, mask=col_mask, other=0.0).to(tl.float32)[None, :]
        out_tile = out_ptr + tl.cast(row0, tl.int64) * stride_om + col0
        tl.store(out_tile + rm[:, None] * stride_om + rn[None, :], y.to(out_ptr.dtype.element_ty),
                 mask=row_mask[:, None] & col_mask[None, :])


def block_m_for(m: int) -> int:
    """Rows per tile: M padded to the 16-row dot tile, up to 128."""
    return min(128, max(16, triton.next_power_of_2(m)))


def tile_shapes(b_k_contiguous: bool) -> list[tuple[int, int, int]]:
    """Every (BLOCK_M, BLOCK_N, BLOCK_K) tiles_for can return for this b layout."""
    return [(bm, bn, BLOCK_K) for bm in (16, 32, 64, 128) for bn in BLOCK_NS if bm * bn <= MAX_TILE_OUTPUTS[b_k_contiguous]]


def tiles_for(m: int, n: int, cube_cores: int, b_k_contiguous: bool) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_K): the BLOCK_N with the least work on the busiest cube core,
    waves x (tile outputs + TILE_OVERHEAD), the larger tile on a tie. E.g. one 16-row tile of
    N=4096 on 24 cores: 256 (16 tiles, one wave), not 128 (32 tiles, a second wave with 8 busy);
    N=1024 on 20 cores: 64 (16 busy cores) rather than 256 (4)."""
    block_m = block_m_for(m)

    def busiest_core(shape: tuple[int, int, int]) -> tuple[int, int]:
        tiles = triton.cdiv(m, block_m) * triton.cdiv(n, shape[1])
        return triton.cdiv(tiles, cube_cores) * (block_m * shape[1] + TILE_OVERHEAD), -shape[1]

    return min((s for s in tile_shapes(b_k_contiguous) if s[0] == block_m), key=busiest_core)


def scaled_mm(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, a_scales: torch.Tensor, b_scales: torch.Tensor,
              bias: torch.Tensor | None) -> None:
    m, k = a.shape
    n = b.shape[1]
    if m == 0 or n == 0:
        return
    b_k_contiguous = b.stride(0) == 1 and n > 1
    cube_cores = core_counts(a.device)["cube"]
    block_m, block_n, block_k = tiles_for(m, n, cube_cores, b_k_contiguous)
    tiles = triton.cdiv(m, block_m) * triton.cdiv(n, block_n)
    scaled_mm_kernel[(grid_size(a.device, tiles, uses_dot=True),)](
        a, b, out, a_scales, b_scales, bias if bias is not None else b_scales,
        m, n, k, a.stride(0), b.stride(0), b.stride(1), out.stride(0),
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
        A_PER_ROW=a_scales.numel() > 1, B_PER_COL=b_scales.numel() > 1,
        HAS_BIAS=bias is not None, B_K_CONTIGUOUS=b_k_contiguous,
    )


def w8a8_linear(input: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor, input_scale: torch.Tensor | None,
                bias: torch.Tensor | None) -> torch.Tensor:
    x = input.reshape(-1, input.shape[-1])
    out = torch.empty((x.shape[0], weight.shape[0]), dtype=input.dtype, device=input.device)
    q = torch.empty(x.shape, dtype=torch.int8, device=x.device)
    if input_scale is None:
        a_scale = torch.empty((x.shape[0], 1), dtype=torch.float32, device=x.device)
        dynamic_scaled_int8_quant(q, x, a_scale, None)
    else:
        a_scale = input_scale
        static_scaled_int8_quant(q, x, input_scale, None)
    scaled_mm(out, q, weight.t(), a_scale, weight_scale, bias)
    return out.view(*input.shape[:-1], weight.shape[0])
