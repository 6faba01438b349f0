"""vLLM layers that run our ops: out-of-tree replacements (`CustomOp.register_oot`) for RMSNorm,
GemmaRMSNorm, SiluAndMul, GeluAndMul and the rotary embeddings vLLM's get_rope builds for
Llama-family, Qwen and Gemma models. vLLM instantiates the replacement wherever a model builds
the original class; its forward_cpu (CPU), forward_cuda (CUDA) or forward_oot (out-of-tree
platforms) runs when the op is enabled (`custom_ops` holds "all", vLLM's default without Inductor,
or "+name"). A form our ops do not take runs vLLM's own forward_native and is not counted."""
from __future__ import annotations

import torch
from vllm.model_executor.custom_op import CustomOp, op_registry_oot
from vllm.model_executor.layers.activation import GeluAndMul, SiluAndMul
from vllm.model_executor.layers.layernorm import GemmaRMSNorm, RMSNorm
from vllm.model_executor.layers.rotary_embedding.base import RotaryEmbedding
from vllm.model_executor.layers.rotary_embedding.dynamic_ntk_scaling_rope import DynamicNTKScalingRotaryEmbedding
from vllm.model_executor.layers.rotary_embedding.linear_scaling_rope import LinearScalingRotaryEmbedding
from vllm.model_executor.layers.rotary_embedding.llama3_rope import Llama3RotaryEmbedding
from vllm.model_executor.layers.rotary_embedding.yarn_scaling_rope import YaRNScalingRotaryEmbedding

import ascendtile.ops as ops
from ascendtile.integrations.vllm.counters import count


def _as_rows(x: torch.Tensor) -> torch.Tensor:
    """x [..., hidden] as [rows, hidden] for an op that writes a new tensor: a view where the
    strides allow, else a copy (Gemma 3's q/k norms get [T, heads, head_dim] slices of the fused
    qkv, whose token stride is not heads · head_dim)."""
    return x.reshape(-1, x.shape[-1])


def _row_view(x: torch.Tensor) -> torch.Tensor | None:
    """x as a [rows, hidden] view for an op that writes in place, or None if no view exists."""
    try:
        return x.view(-1, x.shape[-1])
    except RuntimeError:
        return None


def _ours_on_every_device(cls: type) -> type:
    """The class's `_ascendtile` forward as its CPU, CUDA and out-of-tree forward."""
    cls.forward_cpu = cls.forward_cuda = cls.forward_oot = cls._ascendtile
    return cls


@_ours_on_every_device
class AscendtileRMSNorm(RMSNorm):
    """x · rsqrt(mean(x²) + eps) · weight (no weight: has_weight=False), optionally after adding
    the residual in place: our rms_norm / fused_add_rms_norm."""

    def _ascendtile(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        weight = self.weight.data if (self.pass_weight if residual is None else self.pass_weight_add) else None
        if self.variance_size_override is not None or (weight is not None and weight.dtype != x.dtype):
            return self.forward_native(x, residual)  # variance over a prefix; mixed dtypes
        if residual is None:
            count("rms_norm")
            return ops.rms_norm(_as_rows(x), weight, self.variance_epsilon).view(x.shape)
        rows, residual_rows = _row_view(x), _row_view(residual)
        if rows is None or residual_rows is None:
            return self.forward_native(x, residual)  # written in place: a copy would lose the update
        count("fused_add_rms_norm")
        ops.fused_add_rms_norm(rows, residual_rows, weight, self.variance_epsilon)
        return x, residual


@_ours_on_every_device
class AscendtileGemmaRMSNorm(GemmaRMSNorm):
    """Gemma's x · rsqrt(mean(x²) + eps) · (1 + weight), multiplied in fp32 and rounded once (vLLM's
    semantics): our op on fp32 rows (16-bit inputs are widened first), weight 1 + w in fp32."""

    def _ascendtile(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        weight = self.weight.float() + 1.0
        rows = _as_rows(x).float()
        if residual is None:
            count("rms_norm")
            return ops.rms_norm(rows, weight, self.variance_epsilon).to(x.dtype).view(x.shape)
        count("fused_add_rms_norm")
        # The fp32 sum is normalised and rounded to the residual's dtype on the way out (vLLM).
        wide_residual = _as_rows(residual).float()
        ops.fused_add_rms_norm(rows, wide_residual, weight, self.variance_epsilon)
        residual.copy_(wide_residual.view(residual.shape))
        return rows.to(x.dtype).view(x.shape), residual


@_ours_on_every_device
class AscendtileSiluAndMul(SiluAndMul):
    """silu(x[..., :d]) · x[..., d:]: our silu_and_mul."""

    def _ascendtile(self, x: torch.Tensor) -> torch.Tensor:
        count("silu_and_mul")
        out = ops.silu_and_mul(_as_rows(x))
        return out.view(*x.shape[:-1], out.shape[-1])


@_ours_on_every_device
class AscendtileGeluAndMul(GeluAndMul):
    """gelu(x[..., :d]) · x[..., d:]: our gelu_and_mul for the exact erf GELU (approximate="none",
    vLLM's default), our gelu_tanh_and_mul for approximate="tanh" (Gemma's MLP)."""

    def _ascendtile(self, x: torch.Tensor) -> torch.Tensor:
        name = "gelu_tanh_and_mul" if self.approximate == "tanh" else "gelu_and_mul"
        count(name)
        out = getattr(ops, name)(_as_rows(x))
        return out.view(*x.shape[:-1], out.shape[-1])


class _RotaryForward:
    """Rotates query and key in place with our rotary_embedding, over the cos/sin cache vLLM built
    (cast to the query's dtype as vLLM's own CPU forward does): positions [T] or [B, S]."""

    def _ascendtile(self, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor | None = None):
        count("rotary_embedding")
        cos_sin_cache = self._match_cos_sin_cache_dtype(query)
        return ops.rotary_embedding(positions, query, key, self.head_size, cos_sin_cache, self.is_neox_style)


# The rotary classes that differ from RotaryEmbedding only in how they build cos_sin_cache: the
# forward is the same, so each gets ours under its own name (vLLM looks the name up per class).
ROTARY_CLASSES = (RotaryEmbedding, Llama3RotaryEmbedding, LinearScalingRotaryEmbedding,
                  YaRNScalingRotaryEmbedding, DynamicNTKScalingRotaryEmbedding)
ROTARY_REPLACEMENTS = {cls.__name__: _ours_on_every_device(type(f"Ascendtile{cls.__name__}", (_RotaryForward, cls), {}))
                       for cls in ROTARY_CLASSES}

REPLACEMENTS: dict[str, type] = {
    "RMSNorm": AscendtileRMSNorm,
    "GemmaRMSNorm": AscendtileGemmaRMSNorm,
    "SiluAndMul": AscendtileSiluAndMul,
    "GeluAndMul": AscendtileGeluAndMul,
    **ROTARY_REPLACEMENTS,
}


def register_custom_ops() -> list[str]:
    """Register every replacement whose name no other plugin has taken (vLLM keeps one class per
    name and asserts on a second); returns the names registered. Registering twice in a process
    (vLLM loads general plugins in every process it starts) registers nothing more."""
    registered = []
    for name, cls in REPLACEMENTS.items():
        if name not in op_registry_oot:
            CustomOp.register_oot(cls, name=name)
            registered.append(name)
    return registered
