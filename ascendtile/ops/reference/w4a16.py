"""References: w4a16 (group-wise 4-bit weights, 16- or 32-bit activations).

The packed layout every layer shares (loading, ops, kernels):
  qweight uint8 [N, K/2]: row n holds input k = 2j in the low nibble of byte j and k = 2j + 1 in
          the high nibble, values 0..15. These are the bytes of compressed-tensors' int32
          `weight_packed` [N, K/8] (eight values per int32, k % 8 at bits 4·(k % 8)) read on a
          little-endian machine, so a checkpoint maps onto it without repacking.
  scales  fp32 [N, K/group_size], mins fp32 [N, K/group_size]: w[n, k] = q·scale + min of k's
          group. Every 4-bit format we read is this affine form with exact fp32 parameters:
          GGUF Q4_1 (d, m), Q4_0 (d, −8d), Q4_K (d·sc, −dmin·m: fp16 × 6-bit products),
          compressed-tensors (scale, −z·scale; symmetric z = 8). Each product q·scale and min is
          exact in fp32 and w is rounded once, as gguf's and vLLM's dequantizers do, so the
          dequantized weight is bit-identical to theirs.
"""
from __future__ import annotations

import torch

# Rows of the weight dequantized at once: keeps the fp32 copy of a slice in cache and bounds the
# temporary memory of a large weight.
N_CHUNK = 512


def unpack_nibbles(qweight: torch.Tensor) -> torch.Tensor:
    """uint8 [N, K/2] -> uint8 [N, K] values 0..15 (low nibble first)."""
    return torch.stack((qweight & 15, qweight >> 4), dim=-1).reshape(qweight.shape[0], -1)


def pack_nibbles(q: torch.Tensor) -> torch.Tensor:
    """uint8 [N, K] values 0..15 (K even) -> uint8 [N, K/2], the inverse of unpack_nibbles."""
    pairs = q.to(torch.uint8).reshape(q.shape[0], -1, 2)
    return pairs[..., 0] | (pairs[..., 1] << 4)


def dequantize_w4a16(qweight: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor, group_size: int) -> torch.Tensor:
    """fp32 [N, K]: q·scale + min per group of group_size inputs, in place on the fresh fp32 copy of
    q (the same multiply, then add, as `q * scale + min`, which allocated two more tensors: 2.88
    against 0.34 ms on a 512 x 576 slice, and w4a16_linear 1.2-1.7x slower; AVX2 EPYC, 2026-11-27,
    bench/results/2026-11-27-w4a16-dequant.md)."""
    n = qweight.shape[0]
    q = unpack_nibbles(qweight).float().view(n, -1, group_size)
    return q.mul_(scales[..., None]).add_(mins[..., None]).view(n, -1)


def w4a16_linear(input: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor,
                 group_size: int, bias: torch.Tensor | None) -> torch.Tensor:
    x = input.reshape(-1, input.shape[-1]).float()
    n = qweight.shape[0]
    y = x.new_empty(x.shape[0], n)
    for n0 in range(0, n, N_CHUNK):
        rows = slice(n0, n0 + N_CHUNK)
        y[:, rows] = x @ dequantize_w4a16(qweight[rows], scales[rows], mins[rows], group_size).t()
    if bias is not None:
        y += bias.float()
    return y.to(input.dtype).reshape(*input.shape[:-1], n)
