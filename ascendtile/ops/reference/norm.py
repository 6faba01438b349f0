"""References: rms_norm, fused_add_rms_norm."""
from __future__ import annotations

import torch


def _rstd(xf: torch.Tensor, epsilon: float) -> torch.Tensor:
    """1 / sqrt(mean(xf²) + epsilon) over the last dim of fp32 xf [..., hidden] -> [..., 1] fp32,
    bitwise as HF computes it: CPU aten::mean is sum, then divide by the count, and xf·xf is
    pow(xf, 2). Spelled out because a Python number in an op is wrapped into a tensor and cast
    per call (aten::mean does this for its count too): ~5 µs each on CPU, against ~1 µs for a
    0-dim fp32 tensor; this runs twice per layer per step on the CPU production path."""
    count = torch.scalar_tensor(xf.shape[-1], dtype=torch.float32)
    eps = torch.scalar_tensor(epsilon, dtype=torch.float32)
    return torch.mul(xf, xf).sum(-1, keepdim=True).div_(count).add_(eps).rsqrt_()


def _normalize(x: torch.Tensor, weight: torch.Tensor | None, epsilon: float) -> torch.Tensor:
    xf = x.float()
    normed = xf * _rstd(xf, epsilon)
    if weight is None:  # vLLM's weight=None: the fp32 value, rounded once by the caller's copy
        return normed
    # fp32 normalisation, rounded to the model dtype before the weight is applied (HF semantics).
    return normed.to(weight.dtype) * weight


def _normalize_fp32_into(out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None, epsilon: float) -> None:
    """_normalize for fp32 (every cast is a no-op), the same ops in the same order, written into out
    without temporaries."""
    torch.mul(x, _rstd(x, epsilon), out=out)
    if weight is not None:
        out.mul_(weight)


def rms_norm(out: torch.Tensor, input: torch.Tensor, weight: torch.Tensor | None, epsilon: float) -> None:
    if input.dtype == torch.float32:
        _normalize_fp32_into(out, input, weight, epsilon)
    else:
        out.copy_(_normalize(input, weight, epsilon))


def fused_add_rms_norm(input: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None,
                       epsilon: float) -> None:
    if input.dtype == torch.float32:
        torch.add(input, residual, out=residual)
        _normalize_fp32_into(input, residual, weight, epsilon)
        return
    residual.copy_(input.float() + residual.float())
    input.copy_(_normalize(residual, weight, epsilon))
