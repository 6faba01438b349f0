"""References: static/dynamic int8 quantization (and the rounding w8a8_linear's reference uses).

Rounding is half to even (torch.round, as vLLM's CUDA cvt.rni) and results saturate to
[-128, 127]. Values are x / scale rounded; vLLM's symmetric dynamic kernel multiplies by
127 / max|x| instead, which can land on the other side of a .5 tie: such values differ by 1.
"""
from __future__ import annotations

import torch


def round_saturate(x: torch.Tensor, azp: torch.Tensor | int | None = None) -> torch.Tensor:
    """round-half-even(x) (+ azp), saturated to the int8 range; stays fp32 (exact integers)."""
    q = torch.round(x)
    if azp is not None:
        q = q + azp
    return q.clamp_(-128, 127)


def _safe(scale: torch.Tensor) -> torch.Tensor:
    # An all-zero (or constant, for azp) row has scale 0: divide by 1 instead so it quantizes to
    # the zero point with no NaN/inf; dequantizing gives (q - azp) * 0 = 0.
    return torch.where(scale == 0, torch.ones_like(scale), scale)


def dynamic_symmetric(xf: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row scale = max|x| / 127 and the quantized rows (fp32 holding int8 values)."""
    # Divided by a tensor on x's device, not by a Python number: CUDA torch turns a division by a
    # host scalar into a multiply by its reciprocal, an ulp away from IEEE division at times.
    scale = xf.abs().amax(-1, keepdim=True) / xf.new_tensor(127.0)
    return round_saturate(xf / _safe(scale)), scale


def dynamic_asymmetric(xf: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """vLLM's asymmetric scheme: scale = (max - min) / 255, azp = round(-128 - min / scale)."""
    hi, lo = xf.amax(-1, keepdim=True), xf.amin(-1, keepdim=True)
    scale = (hi - lo) / xf.new_tensor(255.0)  # see dynamic_symmetric
    safe = _safe(scale)
    azp = torch.round(-128 - lo / safe)
    return round_saturate(xf / safe, azp), scale, azp


def static_scaled_int8_quant(out: torch.Tensor, input: torch.Tensor, scale: torch.Tensor, azp: torch.Tensor | None) -> None:
    q = round_saturate(input.float() / scale.reshape(()), None if azp is None else azp.reshape(()))
    out.copy_(q)


def dynamic_scaled_int8_quant(out: torch.Tensor, input: torch.Tensor, scales: torch.Tensor, azp: torch.Tensor | None) -> None:
    xf = input.float()
    if azp is None:
        q, scale = dynamic_symmetric(xf)
    else:
        q, scale, zero = dynamic_asymmetric(xf)
        azp.copy_(zero.reshape(azp.shape))
    scales.copy_(scale.reshape(scales.shape))
    out.copy_(q)
