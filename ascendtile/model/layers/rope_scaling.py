"""cos/sin caches for rotary embeddings with HF transformers' rope scaling ("default", "linear",
"llama3", "yarn"), in the layout `torch.ops.ascend.rotary_embedding` reads: [max_position,
rotary_dim] = cat(cos, sin).

The inverse frequencies are computed in fp32 the way transformers' `ROPE_INIT_FUNCTIONS` do it
(integer arange cast to float, `base ** (arange / dim)` in fp32, the same operation order), so the
caches match HF's rotary embedding outputs to fp32 rounding.
"""
from __future__ import annotations

import math

import torch

ROPE_TYPES = ("default", "linear", "llama3", "yarn")


def rope_type(scaling: dict | None) -> str:
    """The scaling kind named by an HF rope-scaling dict (`rope_type`, or legacy `type`)."""
    if not scaling:
        return "default"
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind not in ROPE_TYPES:
        raise ValueError(f"scaling: rope type {kind!r} not supported; expected one of {', '.join(ROPE_TYPES)}")
    return kind


def _default_inv_freq(rotary_dim: int, base: float) -> torch.Tensor:
    exponents = torch.arange(0, rotary_dim, 2, dtype=torch.int64).to(torch.float32) / rotary_dim
    return 1.0 / (base ** exponents)


def _llama3_inv_freq(inv_freq: torch.Tensor, scaling: dict) -> torch.Tensor:
    # Long wavelengths are interpolated by `factor`, short ones kept, the band between blended.
    factor = scaling["factor"]
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    old_context = scaling["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > old_context / low, inv_freq / factor, inv_freq)
    smooth = (old_context / wavelen - low) / (high - low)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < old_context / high) * ~(wavelen > old_context / low)
    return torch.where(medium, blended, scaled)


def _yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def _yarn_factor(scaling: dict, max_position: int) -> float:
    factor = scaling.get("factor")
    # DeepSeek-V3-style configs may leave `factor` out: the context extension ratio is used.
    return factor if factor is not None else max_position / scaling["original_max_position_embeddings"]


def _yarn_inv_freq(rotary_dim: int, base: float, scaling: dict, max_position: int) -> tuple[torch.Tensor, float]:
    factor = _yarn_factor(scaling, max_position)
    attention_factor = scaling.get("attention_factor")
    mscale, mscale_all_dim = scaling.get("mscale"), scaling.get("mscale_all_dim")
    if attention_factor is None:
        if mscale and mscale_all_dim:
            attention_factor = _yarn_mscale(factor, mscale) / _yarn_mscale(factor, mscale_all_dim)
        else:
            attention_factor = _yarn_mscale(factor)
    beta_fast = scaling.get("beta_fast") or 32
    beta_slow = scaling.get("beta_slow") or 1
    original = scaling["original_max_position_embeddings"]

    def correction_dim(rotations: float) -> float:
        # The dimension whose wavelength completes `rotations` turns over the original context.
        return rotary_dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if scaling.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, rotary_dim - 1)
    if low == high:
        high += 0.001  # HF's guard against a zero-width ramp
    ramp = torch.clamp((torch.arange(rotary_dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    pos_freqs = base ** (torch.arange(0, rotary_dim, 2).to(torch.float32) / rotary_dim)
    extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)
    keep = 1 - ramp  # 1: high-frequency dims keep their original frequency
    inv_freq = interpolation * (1 - keep) + extrapolation * keep
    return inv_freq, float(attention_factor)


def inv_freq_and_attention_factor(rotary_dim: int, base: float, scaling: dict | None, max_position: int) -> tuple[torch.Tensor, float]:
    """fp32 inverse frequencies [rotary_dim // 2] and the factor cos/sin are multiplied by."""
    if rotary_dim <= 0 or rotary_dim % 2:
        raise ValueError(f"rotary_dim: must be a positive even number, got {rotary_dim}")
    kind = rope_type(scaling)
    if kind == "yarn":
        return _yarn_inv_freq(rotary_dim, base, scaling, max_position)
    inv_freq = _default_inv_freq(rotary_dim, base)
    if kind == "linear":
        inv_freq = inv_freq / scaling["factor"]
    elif kind == "llama3":
        inv_freq = _llama3_inv_freq(inv_freq, scaling)
    return inv_freq, 1.0


def build_cos_sin_cache(rotary_dim: int, max_position: int, base: float, scaling: dict | None = None,
                        dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """[max_position, rotary_dim] = cat(cos, sin), each [max_position, rotary_dim // 2], computed in
    fp32 (position × inv_freq, then cos/sin times HF's attention factor) and cast to `dtype`.

    `scaling` is the HF config's rope-scaling dict (HF key names): rope_type / type in "default",
    "linear", "llama3", "yarn"; factor, low_freq_factor, high_freq_factor,
    original_max_position_embeddings, beta_fast, beta_slow, mscale, mscale_all_dim, attention_factor.
    """
    if max_position <= 0:
        raise ValueError(f"max_position: must be > 0, got {max_position}")
    inv_freq, attention_factor = inv_freq_and_attention_factor(rotary_dim, base, scaling, max_position)
    freqs = torch.arange(max_position, dtype=torch.float32)[:, None] * inv_freq[None, :]
    cache = torch.cat((freqs.cos() * attention_factor, freqs.sin() * attention_factor), dim=-1)
    return cache.to(dtype)


def yarn_softmax_mscale(scaling: dict | None) -> float:
    """The factor DeepSeek-V2/V3 multiply the attention softmax scale by: mscale² with
    mscale = 0.1·mscale_all_dim·ln(factor) + 1 (1 when factor <= 1), for a scaled rope config with
    a non-zero mscale_all_dim (HF's rule), else 1.0. Softmax scale = qk_head_dim^-0.5 · this."""
    if not scaling or scaling.get("rope_type", scaling.get("type", "default")) == "default":
        return 1.0
    mscale_all_dim = scaling.get("mscale_all_dim")
    if not mscale_all_dim:
        return 1.0
    if scaling.get("factor") is None:
        raise ValueError("scaling: mscale_all_dim is set but factor is missing")
    mscale = _yarn_mscale(scaling["factor"], mscale_all_dim)
    return mscale * mscale
