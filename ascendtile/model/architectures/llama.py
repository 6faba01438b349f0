"""LlamaForCausalLM: Llama 2/3, SmolLM2, Mistral, Qwen2 (qkv bias), Qwen3 (q/k norm)."""
from __future__ import annotations

from ascendtile.model.architectures.base import CausalLM, DecoderLayer, DecoderModel
from ascendtile.model.architectures.model_config import ModelConfig
from ascendtile.model.layers.attention import Attention
from ascendtile.model.layers.mlp import GatedMLP
from ascendtile.model.layers.rotary import RotaryEmbedding


class LlamaForCausalLM(CausalLM):
    family = "llama"
    tensor_parallel = True

    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config)
        c = config
        rotary = RotaryEmbedding(c.head_dim, c.head_dim, c.max_position_embeddings, c.rope_theta, c.rope_scaling,
                                 is_neox=True)
        layers = [
            DecoderLayer(
                c.hidden_size, c.rms_norm_eps,
                Attention(c.hidden_size, c.num_attention_heads, c.num_key_value_heads, c.head_dim, rotary,
                          qkv_bias=c.qkv_bias, o_bias=c.o_bias, qk_norm_eps=c.rms_norm_eps if c.qk_norm else None,
                          sliding_window=c.sliding_window),
                GatedMLP(c.hidden_size, c.intermediate_size, bias=c.mlp_bias, hidden_act=c.hidden_act),
            )
            for _ in range(c.num_hidden_layers)
        ]
        self.model = DecoderModel(c, layers)
