"""References: rms_norm, fused_add_rms_norm."""
from __future__ import annotations

import torch


def _normalize(x: torch.Tensor, weight: torch.Tensor, epsilon: float) -> torch.Tensor:
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + epsilon)
    # fp32 normalisation, rounded to the model dtype before the weight is applied (HF semantics).
    return (xf * rstd).to(weight.dtype) * weight


def _normalize_fp32_into(out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, epsilon: float) -> None:
    """_normalize for fp32 (every cast is a no-op), the same ops in the same order, written into out
    without temporaries: this runs twice per layer per step on the CPU production path."""
    rstd = x.pow(2).mean(-1, keepdim=True).add_(epsilon).rsqrt_()
    torch.mul(x, rstd, out=out).mul_(weight)


def rms_norm(out: torch.Tensor, input: torch.Tensor, weight: torch.Tensor, epsilon: float) -> None:
    if input.dtype == torch.float32:
        _normalize_fp32_into(out, input, weight, epsilon)
    else:
        out.copy_(_normalize(input, weight, epsilon))


def fused_add_rms_norm(input: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, epsilon: float) -> None:
    if input.dtype == torch.float32:
        torch.add(input, residual, out=residual)
        _normalize_fp32_into(input, residual, weight, epsilon)
        return
    residual.copy_(input.float() + residual.float())
    input.copy_(_normalize(residual, weight, epsilon))
