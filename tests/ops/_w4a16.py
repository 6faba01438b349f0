"""Test data for the w4a16 family: random packed 4-bit weights and an independent float64
construction of the weight they encode (byte arithmetic, no bit operations, no shared code with
ops/reference/w4a16.py)."""
from __future__ import annotations

import torch


def random_w4a16(n: int, k: int, group_size: int, symmetric: bool = False):
    """(qweight uint8 [N, K/2], scales fp32 [N, G], mins fp32 [N, G]) with fp16-representable
    scales (as GGUF's d and compressed-tensors' fp16 scales are), so every q·scale is exact in
    fp32. Sized so that an output of randn inputs has a standard deviation of ~0.85."""
    qweight = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8)
    scales = (torch.rand(n, k // group_size) * 1.5 + 0.5) * (2 / 15 / k ** 0.5)
    scales = scales.half().float()
    if symmetric:
        mins = -8 * scales
    else:
        mins = (-7.5 * scales * (1 + 0.2 * torch.randn_like(scales))).half().float()
    return qweight, scales, mins


def float64_weight(qweight: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor, group_size: int) -> torch.Tensor:
    """float64 [N, K]: byte j of row n holds input 2j as byte % 16 and input 2j + 1 as byte // 16."""
    byte = qweight.double()
    q = torch.empty(qweight.shape[0], 2 * qweight.shape[1], dtype=torch.float64)
    q[:, 0::2] = torch.remainder(byte, 16)
    q[:, 1::2] = torch.div(byte, 16, rounding_mode="floor")
    return q * scales.double().repeat_interleave(group_size, 1) + mins.double().repeat_interleave(group_size, 1)


def float64_linear(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor, group_size: int,
                   bias: torch.Tensor | None) -> torch.Tensor:
    """The op's output computed in float64, then rounded once to x's dtype."""
    y = x.double() @ float64_weight(qweight, scales, mins, group_size).t()
    return (y if bias is None else y + bias.double()).to(x.dtype)
