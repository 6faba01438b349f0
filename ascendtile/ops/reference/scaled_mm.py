"""References: scaled_mm, w8a8_linear (quantization as in reference/quant.py).

On CPU this is the production path of W8A8 models. With int8 dot products in hardware (VNNI or
AMX) the GEMM is torch._int_mm (oneDNN's int8 GEMM, exact int32 sums): 3-5x faster than the fp32
GEMM at SmolLM2's shapes on an AVX-512 VNNI CPU (bench/results/2026-11-25-int8-gemm.md). Without
them (AVX2) torch._int_mm measured 10-30x slower than fp32 matmul, so the GEMM runs as fp32
matmuls over K slices that keep every partial sum exact (`int8_matmul`).
"""
from __future__ import annotations

import torch

from ascendtile.ops.reference.quant import dynamic_symmetric, round_saturate
from ascendtile.platform import cpu_has_int8_dot

# |int8 x int8| <= 2^14, so a sum over 1024 products stays within 2^24, where fp32 holds every
# integer exactly whatever the summation order: an fp32 GEMM over such a slice is exact.
EXACT_K_SLICE = 1024
N_CHUNK = 512


def int8_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Exact a [M, K] @ b [K, N] (int8 values, held as int8 or float) as int32: torch._int_mm on a
    CPU with int8 dot products; elsewhere fp32 matmuls over K slices of EXACT_K_SLICE, and over
    N_CHUNK columns of b so each converted slice of b stays in cache (measured ~2x faster than
    converting the whole weight at decode sizes)."""
    if a.device.type == "cpu" and cpu_has_int8_dot():
        return torch._int_mm(a.to(torch.int8), b.to(torch.int8))
    af = a.float()
    m, k = af.shape
    n = b.shape[1]
    acc = torch.zeros(m, n, dtype=torch.int32, device=a.device)
    for n0 in range(0, n, N_CHUNK):
        for k0 in range(0, k, EXACT_K_SLICE):
            part = af[:, k0:k0 + EXACT_K_SLICE] @ b[k0:k0 + EXACT_K_SLICE, n0:n0 + N_CHUNK].float()
            acc[:, n0:n0 + N_CHUNK] += part.to(torch.int32)
    return acc


def _epilogue(acc: torch.Tensor, a_scales: torch.Tensor, b_scales: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    # fp32: (acc * a_scale) * b_scale, then + bias, in this order (the kernel's order).
    y = acc.float() * a_scales.reshape(-1, 1) * b_scales.reshape(1, -1)
    return y + bias.float() if bias is not None else y


def scaled_mm(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, a_scales: torch.Tensor, b_scales: torch.Tensor,
              bias: torch.Tensor | None) -> None:
    out.copy_(_epilogue(int8_matmul(a, b), a_scales, b_scales, bias))


def w8a8_linear(input: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor, input_scale: torch.Tensor | None,
                bias: torch.Tensor | None) -> torch.Tensor:
    xf = input.reshape(-1, input.shape[-1]).float()
    if input_scale is None:
        q, a_scales = dynamic_symmetric(xf)
    else:
        a_scales = input_scale.reshape(1)
        q = round_saturate(xf / a_scales)
    y = _epilogue(int8_matmul(q, weight.t()), a_scales, weight_scale, bias)
    return y.to(input.dtype).reshape(*input.shape[:-1], weight.shape[0])
