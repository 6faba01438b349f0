"""Gemma3ForCausalLM vs HF transformers on the same random weights, fp32: prefill logits and greedy
cached decoding through the paged cache vs HF full recompute.

The configs make every Gemma-specific path observable: random (1 + w) norm weights (HF's init
leaves them 0), a 4-token sliding window that prompts of 13 + 6 decode steps cross, both layer
types with different rope bases, query_pre_attn_scalar != head_dim, rope scaling on the full
layers, final logit soft-capping, tied and untied heads.
Bound: |Δlogit| < 1e-4 (fp32 both sides; observed ~1e-6).
"""
import pytest
import torch
from transformers import Gemma3TextConfig

from ascendtile.model import load_model
from model.helpers import check_parity, save_tiny

ATOL = 1e-4
PROMPTS = [list(range(3, 16)), [5, 9, 100, 7, 2], [77]]
SIZES = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
             num_key_value_heads=2, head_dim=32, initializer_range=0.1, max_position_embeddings=256,
             sliding_window=4, layer_types=["sliding_attention", "full_attention", "sliding_attention"],
             query_pre_attn_scalar=24)

CASES = {
    "tied_window": Gemma3TextConfig(**SIZES),
    "untied_softcap_rope_scaled": Gemma3TextConfig(
        **SIZES, tie_word_embeddings=False, final_logit_softcapping=3.0,
        rope_parameters={"full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 50000.0},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 100.0}}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_parity_with_hf(case, tmp_path):
    hf = save_tiny(CASES[case], tmp_path, randomize_norms=True)
    ours = load_model(str(tmp_path)).model
    check_parity(ours, hf, PROMPTS, decode_steps=6, atol=ATOL)


def test_layer_kinds_and_norm_offset(tmp_path):
    hf = save_tiny(CASES["tied_window"], tmp_path, randomize_norms=True)
    model = load_model(str(tmp_path)).model
    windows = [layer.self_attn.sliding_window for layer in model.model.layers]
    assert windows == [4, 0, 4]
    bases = [layer.self_attn.rotary for layer in model.model.layers]
    assert bases[0] is bases[2] and bases[0] is not bases[1]
    assert model.model.layers[0].self_attn.scale == 24 ** -0.5
    assert model.model.embed_scale == 8.0
    got = model.model.layers[1].pre_feedforward_layernorm.weight
    torch.testing.assert_close(got, 1 + hf.model.layers[1].pre_feedforward_layernorm.weight, rtol=0, atol=0)
    got = model.model.layers[2].self_attn.k_norm.weight
    torch.testing.assert_close(got, 1 + hf.model.layers[2].self_attn.k_norm.weight, rtol=0, atol=0)


def test_w8a8_checkpoint_round_trip_keeps_norms(tmp_path):
    """save_w8a8 writes HF's (w, not 1 + w) norm weights, so the checkpoint reloads to the same model."""
    from ascendtile.model import quantize_w8a8, save_w8a8
    from model.helpers import PagedDriver

    save_tiny(CASES["tied_window"], tmp_path / "fp32", randomize_norms=True)
    loaded = load_model(str(tmp_path / "fp32"))
    quantize_w8a8(loaded.model)
    save_w8a8(loaded.model, tmp_path / "w8a8", loaded.config.raw)
    again = load_model(str(tmp_path / "w8a8")).model
    for name, param in loaded.model.named_parameters():
        torch.testing.assert_close(dict(again.named_parameters())[name], param, rtol=0, atol=0, msg=name)
    step = {0: PROMPTS[0], 1: PROMPTS[1]}
    torch.testing.assert_close(PagedDriver(again, 2).step(step), PagedDriver(loaded.model, 2).step(step),
                               rtol=0, atol=0)
