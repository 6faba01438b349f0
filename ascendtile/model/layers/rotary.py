"""Rotary embedding module: a cos/sin cache (HF rope scaling applied) + torch.ops.ascend.rotary_embedding."""
from __future__ import annotations

import torch
from torch import nn

import ascendtile.ops as ak
from ascendtile.model.layers.rope_scaling import build_cos_sin_cache


class RotaryEmbedding(nn.Module):
    def __init__(self, head_size: int, rotary_dim: int, max_position: int, base: float,
                 scaling: dict | None, is_neox: bool) -> None:
        """is_neox: rotate halves (Llama/Qwen HF layout); False: interleaved pairs (DeepSeek-V2)."""
        super().__init__()
        self.head_size, self.is_neox = head_size, is_neox
        cache = build_cos_sin_cache(rotary_dim, max_position, base, scaling, torch.get_default_dtype())
        self.register_buffer("cos_sin_cache", cache, persistent=False)

    def forward(self, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor | None,
                validate: bool = True) -> None:
        """Rotate query [T, H, head_size] and key [T, Hkv, head_size] (or None) in place at positions
        [T]. validate=False once the step's positions were checked (AttentionMetadata.validate)."""
        ak.rotary_embedding(positions, query, key, self.head_size, self.cos_sin_cache, self.is_neox, validate=validate)
