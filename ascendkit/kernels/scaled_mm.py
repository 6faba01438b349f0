"""int8 GEMM with scaled epilogue (scaled_mm) and the fused W8A8 linear (w8a8_linear).

One mix kernel, persistent over [BLOCK_M, BLOCK_N] output tiles: int8 x int8 tl.dot accumulating
in int32, then out = (acc * a_scale) * b_scale + bias in fp32.

w8a8_linear at up to FUSED_MAX_M tokens (decode, small batches) quantizes the activations in the
prologue of the same kernel (A_MODE): a float tile is loaded, divided by its scale, rounded half to
even and saturated to int8 on chip: one launch, no int8 copy of the activations in memory.
Dynamic per-token scales need each row's max|x| first: a prologue pass over K computes it for the
tile's rows. Both prologue passes are redone for every N tile, which is cheap while A is a few
rows (its re-reads hit L2) but is N / BLOCK_N times the quantization work for long prefills, so
larger M quantizes once with the vector kernel of quant.py and runs the int8 GEMM.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ascendkit.kernels._int8 import quantize_int8
from ascendkit.kernels._reduce import fast_max
from ascendkit.kernels.quant import dynamic_scaled_int8_quant, static_scaled_int8_quant
from ascendkit.platform import grid_size

A_INT8, A_STATIC, A_DYNAMIC = 0, 1, 2  # a is int8 / float with one scale / float, per-row scale
FUSED_MAX_M = 64  # one M tile: every fused program shares the same few activation rows


@triton.jit
def _load_a(a_tile, rm, rk, stride_am, row_mask, k_left, divisor, A_MODE: tl.constexpr):
    """[BLOCK_M, BLOCK_K] int8 tile of a (quantized on chip from float when A_MODE != A_INT8)."""
    mask = row_mask[:, None] & (rk < k_left)[None, :]
    a = tl.load(a_tile + rm[:, None] * stride_am + rk[None, :], mask=mask, other=0)
    if A_MODE != 0:
        a = quantize_int8(a.to(tl.float32), divisor, 0.0)  # masked zeros stay 0
    return a


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
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, A_MODE: tl.constexpr,
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
        if A_MODE == 1:
            a_scale = tl.load(a_scale_ptr)
            divisor = a_scale
        elif A_MODE == 2:
            absmax = tl.zeros([BLOCK_M], dtype=tl.float32)
            for k0 in range(0, K, BLOCK_K):
                mask = row_mask[:, None] & (rk < K - k0)[None, :]
                x = tl.load(a_tile + rm[:, None] * stride_am + (k0 + rk)[None, :], mask=mask, other=0.0)
                absmax = tl.maximum(absmax, fast_max(tl.abs(x.to(tl.float32)), 1))
            a_scale = absmax / 127.0
            # All-zero rows have scale 0: divide by 1 (they quantize to 0 either way).
            divisor = tl.where(a_scale == 0.0, 1.0, a_scale)[:, None]
        else:
            divisor = 1.0
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.int32)
        for k0 in range(0, K, BLOCK_K):
            a = _load_a(a_tile + k0, rm, rk, stride_am, row_mask, K - k0, divisor, A_MODE)
            b = _load_b(b_tile + tl.cast(k0, tl.int64) * stride_bk, rk, rn, stride_bk, stride_bn, col_mask, K - k0, B_K_CONTIGUOUS)
            acc = tl.dot(a, b, acc)
        if A_MODE == 0:
            if A_PER_ROW:
                a_scale = tl.load(a_scale_ptr + row0 + rm, mask=row_mask, other=0.0)
            else:
                a_scale = tl.load(a_scale_ptr)
        if A_MODE == 1 or not A_PER_ROW:
            y = acc.to(tl.float32) * a_scale
        else:
            y = acc.to(tl.float32) * a_scale[:, None]
        if B_PER_COL:
            y = y * tl.load(b_scale_ptr + col0 + rn, mask=col_mask, other=0.0)[None, :]
        else:
            y = y * tl.load(b_scale_ptr)
        if HAS_BIAS:
            y = y + tl.load(bias_ptr + col0 + rn, mask=col_mask, other=0.0).to(tl.float32)[None, :]
        out_tile = out_ptr + tl.cast(row0, tl.int64) * stride_om + col0
        tl.store(out_tile + rm[:, None] * stride_om + rn[None, :], y.to(out_ptr.dtype.element_ty),
                 mask=row_mask[:, None] & col_mask[None, :])


def tiles_for(m: int, a_mode: int) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_K). Small M is padded to the 16-row dot tile; from M > 32 a square
    64x64 tile (more reuse per loaded byte than 32x128, same int32 accumulator and fp32 epilogue
    size: 64x128 overflows the UB budget). The float prologue of the fused modes holds fp32
    temporaries per element of the [BLOCK_M, BLOCK_K] a tile, so those step K by 64, and by 32 at
    64 rows (bishengir-compile planned 167 KB of UB for the dynamic 64x64x64 tile)."""
    block_m, block_n = (16, 128) if m <= 16 else (32, 128) if m <= 32 else (64, 64)
    if a_mode == A_INT8:
        return block_m, block_n, 128
    return block_m, block_n, 64 if block_m <= 32 else 32


def _launch(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, a_scales: torch.Tensor, b_scales: torch.Tensor,
            bias: torch.Tensor | None, a_mode: int) -> None:
    m, k = a.shape
    n = b.shape[1]
    if m == 0 or n == 0:
        return
    block_m, block_n, block_k = tiles_for(m, a_mode)
    tiles = triton.cdiv(m, block_m) * triton.cdiv(n, block_n)
    scaled_mm_kernel[(grid_size(a.device, tiles, uses_dot=True),)](
        a, b, out, a_scales, b_scales, bias if bias is not None else b_scales,
        m, n, k, a.stride(0), b.stride(0), b.stride(1), out.stride(0),
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, A_MODE=a_mode,
        A_PER_ROW=a_scales.numel() > 1 or a_mode == A_DYNAMIC, B_PER_COL=b_scales.numel() > 1,
        HAS_BIAS=bias is not None, B_K_CONTIGUOUS=b.stride(0) == 1 and n > 1,
    )


def scaled_mm(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, a_scales: torch.Tensor, b_scales: torch.Tensor,
              bias: torch.Tensor | None) -> None:
    _launch(out, a, b, a_scales, b_scales, bias, A_INT8)


def w8a8_linear(input: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor, input_scale: torch.Tensor | None,
                bias: torch.Tensor | None) -> torch.Tensor:
    x = input.reshape(-1, input.shape[-1])
    out = torch.empty((x.shape[0], weight.shape[0]), dtype=input.dtype, device=input.device)
    if x.shape[0] <= FUSED_MAX_M:
        a_mode = A_DYNAMIC if input_scale is None else A_STATIC
        a_scale = input_scale if input_scale is not None else weight_scale  # unused by A_DYNAMIC
        _launch(out, x, weight.t(), a_scale, weight_scale, bias, a_mode)
    else:
        q = torch.empty(x.shape, dtype=torch.int8, device=x.device)
        if input_scale is None:
            a_scale = torch.empty((x.shape[0], 1), dtype=torch.float32, device=x.device)
            dynamic_scaled_int8_quant(q, x, a_scale, None)
        else:
            a_scale = input_scale
            static_scaled_int8_quant(q, x, input_scale, None)
        _launch(out, q, weight.t(), a_scale, weight_scale, bias, A_INT8)
    return out.view(*input.shape[:-1], weight.shape[0])
