"""References: rms_norm, fused_add_rms_norm."""
from __future__ import annotations

import torch


def _normalize(x: torch.Tensor, weight: torch.Tensor, epsilon: float) -> torch.Tensor:
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + epsilon)
    # fp32 normalisation, rounded to the model dtype before the weight is applied (HF semantics).
    return (xf * rstd).to(weight.dtype) * weight


def rms_norm(out: torch.Tensor, input: torch.Tensor, weight: torch.Tensor, epsilon: float) -> None:
    out.copy_(_normalize(input, weight, epsilon))


def fused_add_rms_norm(input: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, epsilon: float) -> None:
    residual.copy_(input.float() + residual.float())
    input.copy_(_normalize(residual, weight, epsilon))
