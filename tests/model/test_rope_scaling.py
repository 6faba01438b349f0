"""build_cos_sin_cache against transformers' own rotary embedding (LlamaRotaryEmbedding, which
calls ROPE_INIT_FUNCTIONS for scaled rope types), and the DeepSeek-V2 softmax mscale."""
import math

import pytest
import torch
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from ascendtile.model.layers.rope_scaling import build_cos_sin_cache, inv_freq_and_attention_factor, yarn_softmax_mscale

YARN_DEEPSEEK = {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096, "beta_fast": 32,
                 "beta_slow": 1, "mscale": 0.707, "mscale_all_dim": 0.707}
SCALINGS = {
    "none": None,
    "default": {"rope_type": "default"},
    "linear": {"rope_type": "linear", "factor": 4.0},
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192},
    "yarn_deepseek": YARN_DEEPSEEK,
    "yarn_plain": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048},
    "yarn_attention_factor": {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 2048,
                              "attention_factor": 0.8, "beta_fast": 16, "beta_slow": 2},
}


def _hf_config(rotary_dim, max_position, base, scaling):
    rope = {"rope_type": "default"} if scaling is None else dict(scaling)
    rope.setdefault("rope_type", rope.pop("type", "default"))
    rope["rope_theta"] = base
    return LlamaConfig(hidden_size=rotary_dim * 2, num_attention_heads=2, head_dim=rotary_dim,
                       max_position_embeddings=max_position, rope_parameters=rope)


def _hf_cos_sin(rotary_dim, max_position, base, scaling):
    emb = LlamaRotaryEmbedding(_hf_config(rotary_dim, max_position, base, scaling))
    positions = torch.arange(max_position)[None]
    cos, sin = emb(torch.zeros(1, dtype=torch.float32), positions)
    half = rotary_dim // 2
    return cos[0, :, :half], sin[0, :, :half]


@pytest.mark.parametrize("name", list(SCALINGS))
@pytest.mark.parametrize("rotary_dim,base", [(64, 10000.0), (128, 500000.0), (80, 1e6)])
def test_matches_hf_rotary_embedding(name, rotary_dim, base):
    max_position = 8192
    cache = build_cos_sin_cache(rotary_dim, max_position, base, SCALINGS[name])
    assert cache.shape == (max_position, rotary_dim) and cache.dtype == torch.float32
    cos, sin = _hf_cos_sin(rotary_dim, max_position, base, SCALINGS[name])
    half = rotary_dim // 2
    torch.testing.assert_close(cache[:, :half], cos, rtol=0, atol=1e-6)
    torch.testing.assert_close(cache[:, half:], sin, rtol=0, atol=1e-6)


@pytest.mark.parametrize("name", ["linear", "llama3", "yarn_deepseek", "yarn_plain", "yarn_attention_factor"])
def test_inv_freq_equals_rope_init_functions(name):
    scaling = SCALINGS[name]
    kind = scaling.get("rope_type", scaling.get("type"))
    hf_inv_freq, hf_factor = ROPE_INIT_FUNCTIONS[kind](_hf_config(128, 8192, 10000.0, scaling), "cpu")
    inv_freq, factor = inv_freq_and_attention_factor(128, 10000.0, scaling, 8192)
    assert torch.equal(inv_freq, hf_inv_freq)
    assert factor == pytest.approx(hf_factor, rel=1e-12)


def test_attention_factor_is_applied():
    # Plain yarn (no mscale pair): cos/sin carry 0.1·ln(factor) + 1; at position 0 cos = that factor.
    cache = build_cos_sin_cache(64, 16, 10000.0, SCALINGS["yarn_plain"])
    assert cache[0, 0].item() == pytest.approx(0.1 * math.log(4.0) + 1.0, rel=1e-6)
    # DeepSeek's mscale == mscale_all_dim cancels out.
    assert build_cos_sin_cache(64, 16, 10000.0, YARN_DEEPSEEK)[0, 0].item() == pytest.approx(1.0)


def test_dtype_and_bad_arguments():
    assert build_cos_sin_cache(64, 8, 10000.0, dtype=torch.bfloat16).dtype == torch.bfloat16
    with pytest.raises(ValueError, match="^scaling"):
        build_cos_sin_cache(64, 8, 10000.0, {"rope_type": "longrope"})
    with pytest.raises(ValueError, match="^rotary_dim"):
        build_cos_sin_cache(63, 8, 10000.0)
    with pytest.raises(ValueError, match="^max_position"):
        build_cos_sin_cache(64, 0, 10000.0)


def test_yarn_softmax_mscale():
    # reference-facts: DeepSeek-V2 softmax scale 192^-0.5 · mscale² = 0.11472.
    assert 192 ** -0.5 * yarn_softmax_mscale(YARN_DEEPSEEK) == pytest.approx(0.11472, abs=5e-6)
    assert yarn_softmax_mscale(None) == 1.0
    assert yarn_softmax_mscale(SCALINGS["llama3"]) == 1.0
    assert yarn_softmax_mscale(SCALINGS["yarn_plain"]) == 1.0  # no mscale_all_dim: HF leaves the scale alone
    assert yarn_softmax_mscale({**YARN_DEEPSEEK, "factor": 1.0}) == 1.0


def test_deepseek_v2_rope_matches_hf_end_to_end():
    # build_cos_sin_cache + rotary_embedding(is_neox=False) == HF DeepSeek-V2's complex-number rope
    # (DeepseekV2RotaryEmbedding freqs_cis, apply_rotary_emb) with the yarn config, on q_pe / k_pe.
    from transformers import DeepseekV2Config
    from transformers.models.deepseek_v2.modeling_deepseek_v2 import DeepseekV2RotaryEmbedding, apply_rotary_emb

    import ascendtile.ops as ak

    rope = {**YARN_DEEPSEEK, "rope_type": YARN_DEEPSEEK["type"], "rope_theta": 10000.0}
    del rope["type"]
    config = DeepseekV2Config(hidden_size=256, num_attention_heads=4, qk_rope_head_dim=64, qk_nope_head_dim=32,
                              max_position_embeddings=163840, rope_parameters=rope)
    positions = torch.tensor([0, 1, 4095, 4096, 70000, 163839])
    freqs_cis = DeepseekV2RotaryEmbedding(config)(torch.zeros(1), positions[None])
    q_pe, k_pe = torch.randn(1, 4, 6, 64), torch.randn(1, 1, 6, 64)
    hf_q, hf_k = apply_rotary_emb(q_pe, k_pe, freqs_cis)
    cache = build_cos_sin_cache(64, 163840, 10000.0, YARN_DEEPSEEK)
    q, k = q_pe[0].transpose(0, 1).clone(), k_pe[0].transpose(0, 1).clone()  # [T, H, 64]
    ak.rotary_embedding(positions, q, k, 64, cache, False)
    torch.testing.assert_close(q, hf_q[0].transpose(0, 1), rtol=0, atol=2e-5)
    torch.testing.assert_close(k, hf_k[0].transpose(0, 1), rtol=0, atol=2e-5)
