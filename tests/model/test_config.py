"""config.json parsing across transformers 4.x and 5.x spellings and architecture quirks."""
import pytest

from ascendtile.model import parse_config

BASE = {"vocab_size": 100, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4}


def test_v4_and_v5_rope_spellings_agree():
    v4 = parse_config({**BASE, "architectures": ["LlamaForCausalLM"], "rope_theta": 5e5,
                       "rope_scaling": {"rope_type": "llama3", "factor": 8.0}})
    v5 = parse_config({**BASE, "architectures": ["LlamaForCausalLM"],
                       "rope_parameters": {"rope_theta": 5e5, "rope_type": "llama3", "factor": 8.0}})
    assert v4.rope_theta == v5.rope_theta == 5e5
    assert v4.rope_scaling == v5.rope_scaling == {"rope_type": "llama3", "factor": 8.0}
    default = parse_config({**BASE, "architectures": ["LlamaForCausalLM"],
                            "rope_parameters": {"rope_theta": 1e4, "rope_type": "default"}})
    assert default.rope_scaling is None


def test_architecture_quirks():
    qwen2 = parse_config({**BASE, "architectures": ["Qwen2ForCausalLM"], "sliding_window": 4096,
                          "use_sliding_window": False, "eos_token_id": [7, 8]})
    assert qwen2.qkv_bias and not qwen2.o_bias and qwen2.sliding_window == 0 and qwen2.eos_token_id == [7, 8]
    qwen3 = parse_config({**BASE, "architectures": ["Qwen3ForCausalLM"], "head_dim": 32, "num_key_value_heads": 2})
    assert qwen3.qk_norm and qwen3.head_dim == 32 and qwen3.num_key_value_heads == 2
    mistral = parse_config({**BASE, "architectures": ["MistralForCausalLM"], "sliding_window": 4096, "head_dim": None})
    assert mistral.sliding_window == 4096 and mistral.head_dim == 16 and mistral.num_key_value_heads == 4
    ds = parse_config({**BASE, "architectures": ["DeepseekV2ForCausalLM"], "qk_nope_head_dim": 128,
                       "qk_rope_head_dim": 64, "rope_theta": 1e4,
                       "rope_scaling": {"type": "yarn", "factor": 40, "mscale_all_dim": 0.707}})
    assert ds.family == "deepseek_v2" and ds.head_dim == 192 and ds.rope_scaling["type"] == "yarn"


@pytest.mark.parametrize("raw, message", [
    ({"architectures": ["GPT2LMHeadModel"]}, "unknown architecture 'GPT2LMHeadModel'"),
    ({"architectures": ["Gemma3ForConditionalGeneration"]},
     "architecture 'Gemma3ForConditionalGeneration': Gemma 3 with its vision tower"),
    ({}, "no 'architectures'"),
    ({"architectures": ["LlamaForCausalLM"], "hidden_act": "gelu"}, "hidden_act 'gelu'"),
    ({"architectures": ["Gemma3ForCausalLM"], "hidden_activation": "relu"}, "hidden_activation 'relu'"),
    ({"architectures": ["Gemma3ForCausalLM"], "layer_types": ["full_attention"]}, "layer_types must name each"),
    ({"architectures": ["Gemma3ForCausalLM"], "layer_types": ["full_attention", "chunked"]}, "layer_types"),
    ({"architectures": ["Gemma3ForCausalLM"], "use_bidirectional_attention": True}, "use_bidirectional"),
    ({"architectures": ["Gemma3ForCausalLM"], "attn_logit_softcapping": 50.0}, "attn_logit_softcapping"),
    ({"architectures": ["Gemma3ForCausalLM"], "rope_parameters": {
        "full_attention": {"rope_type": "default", "rope_theta": 1e6},
        "sliding_attention": {"rope_type": "yarn", "factor": 2.0}}}, "rope_type 'yarn' on sliding layers"),
])
def test_rejected_configs_name_the_file(raw, message):
    with pytest.raises(ValueError, match=f"^my/config.json: {message}"):
        parse_config({**BASE, **raw}, "my/config.json")


def test_gemma3_defaults_and_both_rope_spellings():
    """Fields a Gemma 3 config.json omits take Gemma3TextConfig's defaults; the 4.x spelling
    (rope_theta, rope_local_base_freq, rope_scaling for the full layers) equals the 5.x
    rope_parameters per layer type."""
    from transformers import Gemma3TextConfig

    arch = {"architectures": ["Gemma3ForCausalLM"], "num_hidden_layers": 7}
    bare = parse_config({**BASE, **arch})
    hf = Gemma3TextConfig(num_hidden_layers=7)
    assert bare.layer_types == hf.layer_types and bare.sliding_window == hf.sliding_window
    assert bare.head_dim == 256 and bare.tie_word_embeddings and bare.hidden_act == "gelu_pytorch_tanh"
    assert bare.attention_scale == 256 ** -0.5 and bare.qk_norm and bare.final_logit_softcapping == 0.0
    assert (bare.rope_theta, bare.local_rope_theta, bare.rope_scaling) == (1e6, 1e4, None)
    v4 = parse_config({**BASE, **arch, "rope_theta": 5e5, "rope_local_base_freq": 100.0,
                       "rope_scaling": {"rope_type": "linear", "factor": 8.0}, "query_pre_attn_scalar": 144})
    v5 = parse_config({**BASE, **arch, "query_pre_attn_scalar": 144, "rope_parameters": {
        "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 5e5},
        "sliding_attention": {"rope_type": "default", "rope_theta": 100.0}}})
    for c in (v4, v5):
        assert (c.rope_theta, c.local_rope_theta, c.attention_scale) == (5e5, 100.0, 144 ** -0.5)
        assert c.rope_scaling == {"rope_type": "linear", "factor": 8.0}
