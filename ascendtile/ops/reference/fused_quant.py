"""References: RMSNorm / SiLU·mul with int8 outputs, as the unfused pair of existing references.

Each is the existing op writing its model-dtype output into a temporary, then the existing int8
quantization of that temporary (x / scale in fp32, rounded half to even, saturated to
[-128, 127]; dynamic scale = max|y| / 127 per token). So on the CPU path fused and unfused are
equal by construction; the Triton kernels match within one int8 step (tests/kernels/).
"""
from __future__ import annotations

import torch

from ascendtile.ops.reference.activation import silu_and_mul as _silu_and_mul
from ascendtile.ops.reference.norm import fused_add_rms_norm as _fused_add_rms_norm
from ascendtile.ops.reference.norm import rms_norm as _rms_norm
from ascendtile.ops.reference.quant import dynamic_scaled_int8_quant, static_scaled_int8_quant


def _normed(input: torch.Tensor, weight: torch.Tensor, epsilon: float, residual: torch.Tensor | None) -> torch.Tensor:
    """rms_norm(input) or, with a residual, fused_add_rms_norm's output (residual updated in place)."""
    out = torch.empty(input.shape, dtype=input.dtype, device=input.device)
    if residual is None:
        _rms_norm(out, input, weight, epsilon)
    else:
        out.copy_(input)
        _fused_add_rms_norm(out, residual, weight, epsilon)
    return out


def rms_norm_dynamic_per_token_quant(result: torch.Tensor, input: torch.Tensor, weight: torch.Tensor,
                                     scale: torch.Tensor, epsilon: float, scale_ub: torch.Tensor | None,
                                     residual: torch.Tensor | None) -> None:
    dynamic_scaled_int8_quant(result, _normed(input, weight, epsilon, residual), scale, None)


def rms_norm_static_int8_quant(result: torch.Tensor, input: torch.Tensor, weight: torch.Tensor,
                               scale: torch.Tensor, epsilon: float) -> None:
    static_scaled_int8_quant(result, _normed(input, weight, epsilon, None), scale, None)


def fused_add_rms_norm_static_int8_quant(result: torch.Tensor, input: torch.Tensor, residual: torch.Tensor,
                                         weight: torch.Tensor, scale: torch.Tensor, epsilon: float) -> None:
    static_scaled_int8_quant(result, _normed(input, weight, epsilon, residual), scale, None)


def silu_and_mul_quant(result: torch.Tensor, input: torch.Tensor, scale: torch.Tensor) -> None:
    d = input.shape[-1] // 2
    out = torch.empty((*input.shape[:-1], d), dtype=input.dtype, device=input.device)
    _silu_and_mul(out, input)
    static_scaled_int8_quant(result, out, scale, None)
