"""Gemma3ForCausalLM (text): GeGLU MLP, (1 + w) RMSNorms before and after both attention and MLP,
q/k norm, embeddings scaled by sqrt(hidden), softmax scale query_pre_attn_scalar ** -0.5, and
per-layer attention: sliding-window layers use a local rope base, full layers the global one
(with rope scaling, if any). LM head tied to the embeddings unless the checkpoint has one.
Tensor parallel through the shared layers: heads split (a single KV head, as in gemma3-270m,
replicated), the per-head q/k norms and the hidden-size norms whole on every rank."""
from __future__ import annotations

import torch

from ascendtile.model.architectures.base import CausalLM, DecoderLayer, DecoderModel
from ascendtile.model.architectures.model_config import ModelConfig
from ascendtile.model.attention_metadata import AttentionMetadata
from ascendtile.model.layers.attention import Attention
from ascendtile.model.layers.mlp import GatedMLP
from ascendtile.model.layers.norm import RMSNorm
from ascendtile.model.layers.rotary import RotaryEmbedding

NORM_OFFSET = 1.0  # Gemma norms scale by (1 + w)


class SandwichDecoderLayer(DecoderLayer):
    """Normalises the input and the output of both attention and MLP (Gemma 2/3); the residual
    adds are fused into the input norm and the pre-feedforward norm. post_attention_layernorm
    here normalises the attention output (in Llama it is the pre-MLP norm)."""

    def __init__(self, hidden_size: int, eps: float, self_attn: Attention, mlp: GatedMLP) -> None:
        super().__init__(hidden_size, eps, self_attn, mlp, NORM_OFFSET)
        self.pre_feedforward_layernorm = RMSNorm(hidden_size, eps, NORM_OFFSET)
        self.post_feedforward_layernorm = RMSNorm(hidden_size, eps, NORM_OFFSET)

    def forward(self, positions: torch.Tensor, h: torch.Tensor, residual: torch.Tensor | None,
                meta: AttentionMetadata) -> tuple[torch.Tensor, torch.Tensor]:
        h, residual = self.attend(positions, h, residual, meta)
        h, residual = self.pre_feedforward_layernorm(self.post_attention_layernorm(h), residual)
        return self.post_feedforward_layernorm(self.mlp(h)), residual


class Gemma3ForCausalLM(CausalLM):
    family = "gemma3"
    tensor_parallel = True

    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config)
        c = config
        rotary = {
            "full_attention": RotaryEmbedding(c.head_dim, c.head_dim, c.max_position_embeddings, c.rope_theta,
                                              c.rope_scaling, is_neox=True),
            "sliding_attention": RotaryEmbedding(c.head_dim, c.head_dim, c.max_position_embeddings,
                                                 c.local_rope_theta, None, is_neox=True),
        }
        layers = [
            SandwichDecoderLayer(
                c.hidden_size, c.rms_norm_eps,
                Attention(c.hidden_size, c.num_attention_heads, c.num_key_value_heads, c.head_dim, rotary[kind],
                          qkv_bias=c.qkv_bias, o_bias=c.o_bias, qk_norm_eps=c.rms_norm_eps,
                          sliding_window=c.sliding_window if kind == "sliding_attention" else 0,
                          scale=c.attention_scale, norm_offset=NORM_OFFSET),
                GatedMLP(c.hidden_size, c.intermediate_size, hidden_act=c.hidden_act),
            )
            for kind in c.layer_types
        ]
        self.model = DecoderModel(c, layers, embed_scale=c.hidden_size ** 0.5, norm_offset=NORM_OFFSET)
