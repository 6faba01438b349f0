"""Run by the vLLM venv's Python (tests/integrations/test_vllm_plugin.py): every layer class our
plugin replaces, built the way vLLM's models build it, against vLLM's own pure-torch forward
(`forward_native`) on the same inputs, in the forms vLLM's callers pass; writes per case the
largest difference and our op calls it made as JSON, with the general plugins installed and those
vLLM loads under this process's VLLM_PLUGINS. Usage: vllm_layers.py OUT_JSON."""
import json
import sys

import torch

CASES = {}


def case(name):
    def register(fn):
        CASES[name] = fn
        return fn
    return register


def diff(ours, theirs) -> float:
    pairs = zip(ours, theirs) if isinstance(ours, tuple) else [(ours, theirs)]
    return max((a.float() - b.float()).abs().max().item() for a, b in pairs if a is not None)


def norm_case(layer, x, residual=None):
    """ours on clones (the fused form writes in place), vLLM's forward_native on clones."""
    if residual is None:
        return diff(layer(x.clone()), layer.forward_native(x.clone()))
    return diff(layer(x.clone(), residual.clone()), layer.forward_native(x.clone(), residual.clone()))


@case("rms_norm")
def _():
    from vllm.model_executor.layers.layernorm import RMSNorm
    layer = RMSNorm(64, eps=1e-6)
    layer.weight.data.normal_()
    return norm_case(layer, torch.randn(5, 64))


@case("rms_norm_fused_residual")
def _():
    from vllm.model_executor.layers.layernorm import RMSNorm
    layer = RMSNorm(64, eps=1e-6)
    layer.weight.data.normal_()
    return norm_case(layer, torch.randn(5, 64), torch.randn(5, 64))


@case("rms_norm_no_weight_4d")
def _():
    from vllm.model_executor.layers.layernorm import RMSNorm
    return norm_case(RMSNorm(64, eps=1e-6, has_weight=False), torch.randn(2, 2, 3, 64))


@case("rms_norm_var_hidden_size_is_vllms")  # variance over a prefix: vLLM's own forward, not ours
def _():
    from vllm.model_executor.layers.layernorm import RMSNorm
    return norm_case(RMSNorm(64, eps=1e-6, var_hidden_size=32), torch.randn(5, 64))


@case("gemma_rms_norm_bf16_qkv_slice")  # Gemma 3's q norm: [T, H, D] slices of the fused qkv
def _():
    from vllm.model_executor.layers.layernorm import GemmaRMSNorm
    layer = GemmaRMSNorm(32, eps=1e-6).to(torch.bfloat16)
    layer.weight.data.normal_()
    qkv = torch.randn(7, 6 * 32, dtype=torch.bfloat16)
    return norm_case(layer, qkv[:, :4 * 32].view(7, 4, 32))


@case("gemma_rms_norm_fused_residual_bf16")
def _():
    from vllm.model_executor.layers.layernorm import GemmaRMSNorm
    layer = GemmaRMSNorm(64, eps=1e-6).to(torch.bfloat16)
    layer.weight.data.normal_()
    return norm_case(layer, torch.randn(5, 64, dtype=torch.bfloat16), torch.randn(5, 64, dtype=torch.bfloat16))


@case("silu_and_mul_3d")
def _():
    from vllm.model_executor.layers.activation import SiluAndMul
    layer, x = SiluAndMul(), torch.randn(2, 3, 2 * 48)
    return diff(layer(x), layer.forward_native(x))


@case("gelu_and_mul_erf")
def _():
    from vllm.model_executor.layers.activation import GeluAndMul
    layer, x = GeluAndMul(approximate="none"), torch.randn(5, 2 * 48)
    return diff(layer(x), layer.forward_native(x))


@case("gelu_and_mul_tanh")
def _():
    from vllm.model_executor.layers.activation import GeluAndMul
    layer, x = GeluAndMul(approximate="tanh"), torch.randn(5, 2 * 48)
    return diff(layer(x), layer.forward_native(x))


def rope_case(rope_parameters, is_neox, positions_shape):
    from vllm.model_executor.layers.rotary_embedding import get_rope
    rope = get_rope(64, 4096, is_neox, rope_parameters, torch.float32)
    positions = torch.randint(0, 4096, positions_shape)
    query, key = torch.randn(*positions_shape, 4 * 64), torch.randn(*positions_shape, 2 * 64)
    theirs = rope.forward_native(positions, query.clone(), key.clone())
    return diff(rope(positions, query.clone(), key.clone()), theirs)


@case("rope_neox")
def _():
    return rope_case(None, True, (9,))


@case("rope_gptj_2d_positions")
def _():
    return rope_case(None, False, (2, 5))


@case("rope_partial")
def _():
    return rope_case({"rope_theta": 1e4, "partial_rotary_factor": 0.5}, True, (9,))


@case("rope_llama3")
def _():
    return rope_case({"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 1024}, True, (9,))


@case("rope_yarn")
def _():
    return rope_case({"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0,
                      "original_max_position_embeddings": 1024}, True, (9,))


if __name__ == "__main__":
    from importlib.metadata import entry_points

    from vllm.config import CompilationConfig, VllmConfig, set_current_vllm_config
    from vllm.plugins import DEFAULT_PLUGINS_GROUP, load_plugins_by_group

    from ascendtile.integrations.vllm import register
    from ascendtile.integrations.vllm.counters import op_calls, reset_op_calls

    # run with VLLM_PLUGINS empty: the general plugins installed, and those vLLM would load
    found = sorted(plugin.name for plugin in entry_points(group=DEFAULT_PLUGINS_GROUP))
    loaded = sorted(load_plugins_by_group(DEFAULT_PLUGINS_GROUP))
    register()
    torch.manual_seed(0)
    results = {}
    # custom_ops "all": every replaced layer enabled, as under enforce_eager
    with set_current_vllm_config(VllmConfig(compilation_config=CompilationConfig(custom_ops=["all"]))):
        for name, fn in CASES.items():
            reset_op_calls()
            results[name] = {"max_diff": fn(), "op_calls": op_calls()}
    with open(sys.argv[1], "w") as f:
        json.dump({"plugins_found": found, "plugins_loaded": loaded, "cases": results}, f, indent=1)
