"""DeepseekV2ForCausalLM (MLA) vs HF transformers on the same random weights, fp32: prefill
logits and greedy cached decoding through the paged latent cache vs HF full recompute.

Bound: |Δlogit| < 1e-4. Both sides compute in fp32; ours attends in the absorbed latent space
(q·W_UK against the cached kv_c) where HF expands K/V per head, so only summation order differs:
observed max ~3e-6 on these configs.
"""
import pytest
import torch
from transformers import DeepseekV2Config

from ascendtile.model import load_model
from model.helpers import check_parity, save_tiny

ATOL = 1e-4
PROMPTS = [list(range(3, 16)), [5, 9, 100, 7, 2]]  # 13 + 6 decode steps crosses a 16-token block


def _config(**over):
    base = dict(vocab_size=128, hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=4, n_routed_experts=4, n_shared_experts=1,
                num_experts_per_tok=2, first_k_dense_replace=1, kv_lora_rank=32, q_lora_rank=None,
                qk_rope_head_dim=16, qk_nope_head_dim=16, v_head_dim=24, n_group=1, topk_group=1,
                initializer_range=0.1, max_position_embeddings=256)
    base.update(over)
    return DeepseekV2Config(**base)


CASES = {
    # all layers dense, low-rank q (q_a_proj -> q_a_layernorm -> q_b_proj)
    "dense_q_lora": _config(first_k_dense_replace=2, q_lora_rank=24),
    # layer 0 dense, layer 1 MoE (greedy top-2 of 4, one shared expert, scaled weights)
    "moe_greedy": _config(routed_scaling_factor=2.5),
    # group-limited routing (2 of 4 groups) and YaRN rope with DeepSeek's mscale on the softmax scale
    "moe_grouped_yarn": _config(n_routed_experts=8, n_group=4, topk_group=2, topk_method="group_limited_greedy",
                                rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                                 "original_max_position_embeddings": 64, "mscale": 0.707,
                                                 "mscale_all_dim": 0.707, "beta_fast": 32, "beta_slow": 1}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_parity_with_hf(case, tmp_path):
    hf = save_tiny(CASES[case], tmp_path, randomize_norms=True)
    ours = load_model(str(tmp_path)).model
    check_parity(ours, hf, PROMPTS, decode_steps=6, atol=ATOL)


def test_kv_cache_layout(tmp_path):
    save_tiny(CASES["moe_greedy"], tmp_path)
    loaded = load_model(str(tmp_path))
    model = loaded.model
    assert loaded.config.architecture == "DeepseekV2ForCausalLM"
    # one latent head of kv_lora_rank + rope dim per token and layer, no separate V
    assert model.kv_cache_bytes_per_block(16, torch.float16) == 2 * 16 * (32 + 16) * 2
    model.allocate_kv_cache(3, 16, torch.float32, "cpu")
    assert model.model.layers[0].self_attn.kv_cache.shape == (3, 16, 48)
    model.allocate_kv_cache(5, 16, torch.float32, "cpu")  # re-callable
    assert model.model.layers[1].self_attn.kv_cache.shape == (5, 16, 48)
