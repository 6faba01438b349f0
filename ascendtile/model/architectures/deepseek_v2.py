"""DeepseekV2ForCausalLM: MLA attention; dense MLP for the first `first_k_dense_replace` layers,
MoE (routed + shared experts) after, as in HF transformers 5. Tensor-parallel: MLA by heads,
dense MLPs and every expert by intermediate rows (layers/mla.py, layers/moe.py)."""
from __future__ import annotations

from ascendtile.model.architectures.base import CausalLM, DecoderLayer, DecoderModel
from ascendtile.model.architectures.model_config import ModelConfig
from ascendtile.model.layers.mla import MLAttention
from ascendtile.model.layers.mlp import GatedMLP
from ascendtile.model.layers.moe import MoE
from ascendtile.model.layers.rope_scaling import yarn_softmax_mscale
from ascendtile.model.layers.rotary import RotaryEmbedding


class DeepseekV2ForCausalLM(CausalLM):
    family = "deepseek_v2"
    tensor_parallel = True

    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config)
        c, g = config, config.get
        rope_dim = g("qk_rope_head_dim")
        rotary = RotaryEmbedding(rope_dim, rope_dim, c.max_position_embeddings, c.rope_theta, c.rope_scaling,
                                 is_neox=False)
        scale = c.head_dim ** -0.5 * yarn_softmax_mscale(c.rope_scaling)
        layers = []
        for index in range(c.num_hidden_layers):
            attn = MLAttention(c.hidden_size, c.num_attention_heads, g("q_lora_rank"), g("kv_lora_rank"),
                               g("qk_nope_head_dim"), rope_dim, g("v_head_dim"), scale, rotary,
                               attention_bias=g("attention_bias", False))
            if index >= g("first_k_dense_replace", 0) and g("n_routed_experts"):
                mlp = MoE(c.hidden_size, g("moe_intermediate_size"), g("n_routed_experts"), g("num_experts_per_tok"),
                          g("n_shared_experts") or 0, g("routed_scaling_factor", 1.0), g("topk_method", "greedy"),
                          g("n_group") or 1, g("topk_group") or 1)
            else:
                mlp = GatedMLP(c.hidden_size, c.intermediate_size, bias=g("mlp_bias", False))
            layers.append(DecoderLayer(c.hidden_size, c.rms_norm_eps, attn, mlp))
        self.model = DecoderModel(c, layers)

    def post_load(self) -> None:
        super().post_load()
        for attn in self.attention_layers():
            attn.absorb_weights()
