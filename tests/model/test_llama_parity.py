"""LlamaForCausalLM family vs HF transformers on the same random weights, fp32: prefill logits and
greedy cached decoding through the paged cache vs HF full recompute; chunked prefill mixed with
decode in one flat batch.

Bound: |Δlogit| < 1e-4 (fp32 on both sides, only summation order differs; observed ~1.5e-6).
"""
import pytest
import torch
from transformers import LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config

from ascendtile.model import load_model
from model.helpers import PagedDriver, check_parity, hf_logits, save_tiny

ATOL = 1e-4
PROMPTS = [list(range(3, 16)), [5, 9, 100, 7, 2], [77]]  # 13 + 6 decode steps crosses a 16-token block
SIZES = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, initializer_range=0.1, max_position_embeddings=256)

CASES = {
    "llama_gqa_tied": LlamaConfig(**SIZES, tie_word_embeddings=True),
    "llama_untied_bias_rope_scaled": LlamaConfig(
        **SIZES, tie_word_embeddings=False, attention_bias=True, mlp_bias=True,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 64}),
    "qwen2_qkv_bias": Qwen2Config(**SIZES),
    "qwen3_qk_norm": Qwen3Config(**SIZES, head_dim=32),
    "mistral_sliding_window": MistralConfig(**SIZES, sliding_window=6),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_parity_with_hf(case, tmp_path):
    hf = save_tiny(CASES[case], tmp_path, randomize_norms=True)
    ours = load_model(str(tmp_path)).model
    check_parity(ours, hf, PROMPTS, decode_steps=6, atol=ATOL)


def test_qwen2_bias_is_loaded(tmp_path):
    save_tiny(CASES["qwen2_qkv_bias"], tmp_path)
    attn = load_model(str(tmp_path)).model.model.layers[0].self_attn
    assert attn.qkv_proj.bias is not None and attn.o_proj.bias is None


def test_chunked_prefill_mixed_with_decode(tmp_path):
    """Sequence 0 prefills in two chunks while sequence 1 prefills and then decodes beside it."""
    hf = save_tiny(CASES["llama_gqa_tied"], tmp_path, randomize_norms=True)
    model = load_model(str(tmp_path)).model
    a, b = list(range(10, 31)), [4, 8, 15, 16, 23]
    driver = PagedDriver(model, 2)
    first = driver.step({0: a[:9], 1: b})
    nxt = int(first[-1].argmax())
    second = driver.step({0: a[9:], 1: [nxt]})  # chunk 2 (context 9 cached) + a decode in one batch
    torch.testing.assert_close(first[:9], hf_logits(hf, a[:9]), atol=ATOL, rtol=0)
    torch.testing.assert_close(second[:12], hf_logits(hf, a)[9:], atol=ATOL, rtol=0)
    torch.testing.assert_close(second[12], hf_logits(hf, b + [nxt])[-1], atol=ATOL, rtol=0)


def test_kv_cache_layout(tmp_path):
    save_tiny(CASES["llama_gqa_tied"], tmp_path)
    model = load_model(str(tmp_path)).model
    head_dim = 64 // 4
    assert model.kv_cache_bytes_per_block(16, torch.bfloat16) == 2 * (2 * 16 * 2 * head_dim) * 2  # layers·K,V·bytes
    model.allocate_kv_cache(7, 16, torch.float32, "cpu")
    attn = model.model.layers[1].self_attn
    assert attn.key_cache.shape == attn.value_cache.shape == (7, 16, 2, head_dim)
