"""config.json parsing across transformers 4.x and 5.x spellings and architecture quirks."""
import pytest

from ascendkit.model import parse_config

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
    ({}, "no 'architectures'"),
    ({"architectures": ["LlamaForCausalLM"], "hidden_act": "gelu"}, "hidden_act 'gelu'"),
])
def test_rejected_configs_name_the_file(raw, message):
    with pytest.raises(ValueError, match=f"^my/config.json: {message}"):
        parse_config({**BASE, **raw}, "my/config.json")
