"""parse_config / load_config: an HF config.json -> ModelConfig (architectures/model_config.py),
normalised across transformers 4.x (`rope_theta` + `rope_scaling`) and 5.x (`rope_parameters`)
spellings, with Gemma 3's defaults (HF's Gemma3TextConfig) filled in where its config.json
leaves them out.
`architectures[0]` must be a name in architectures/registry.py. Fields specific to one
architecture either stay in `raw` for its class to read (DeepSeek-V2's MLA/MoE fields) or are
parsed here into ModelConfig fields (Gemma 3's layer types, local rope base, softmax scale)."""
from __future__ import annotations

import json
from pathlib import Path

from ascendtile.model.architectures.model_config import ModelConfig
from ascendtile.model.architectures.registry import ARCHITECTURES, model_class
from ascendtile.model.layers.mlp import ACTIVATIONS

# Gemma3TextConfig's defaults: a config.json written by transformers omits fields left at them,
# and a GGUF carries none of these.
_GEMMA3_DEFAULTS = {
    "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh", "query_pre_attn_scalar": 256,
    "sliding_window": 4096, "sliding_window_pattern": 6, "rope_theta": 1_000_000.0,
    "rope_local_base_freq": 10_000.0, "tie_word_embeddings": True, "rms_norm_eps": 1e-6,
}


def _rope(raw: dict) -> tuple[float, dict | None]:
    params = raw.get("rope_parameters") or raw.get("rope_scaling") or {}
    if "full_attention" in params:  # transformers 5 spells Gemma 3's rope per layer type
        params = params["full_attention"]
    params = dict(params)
    theta = float(params.pop("rope_theta", raw.get("rope_theta", 10000.0)))
    kind = params.get("rope_type", params.get("type", "default"))
    return theta, (params if kind != "default" else None)


def _gemma3_fields(raw: dict, source: str) -> dict:
    """Layer types, the sliding layers' rope base and the attention scale of a Gemma 3 config."""
    if raw.get("use_bidirectional_attention"):
        raise ValueError(f"{source}: use_bidirectional_attention is not supported (causal decoding only)")
    if raw.get("attn_logit_softcapping"):
        # transformers' Gemma 3 stores the field but never applies it, and released Gemma 3
        # checkpoints leave it null: refuse rather than pick one of two disagreeing meanings.
        raise ValueError(f"{source}: attn_logit_softcapping is not supported for Gemma 3 (must be null)")
    local = (raw.get("rope_parameters") or {}).get("sliding_attention") or {}
    if local.get("rope_type", "default") != "default":
        raise ValueError(f"{source}: rope_type {local['rope_type']!r} on sliding layers is not supported")
    pattern = raw["sliding_window_pattern"]
    types = raw.get("layer_types") or [
        "full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(raw["num_hidden_layers"])]
    unknown = set(types) - {"full_attention", "sliding_attention"}
    if unknown or len(types) != raw["num_hidden_layers"]:
        raise ValueError(f"{source}: layer_types must name each of the {raw['num_hidden_layers']} layers "
                         f"'full_attention' or 'sliding_attention', got {types}")
    return {
        "layer_types": list(types),
        "local_rope_theta": float(local.get("rope_theta", raw["rope_local_base_freq"])),
        "attention_scale": float(raw["query_pre_attn_scalar"]) ** -0.5,
        "final_logit_softcapping": float(raw.get("final_logit_softcapping") or 0.0),
    }


def parse_config(raw: dict, source: str = "config.json") -> ModelConfig:
    """Build a ModelConfig from a config.json dict; `source` names the file in errors."""
    archs = raw.get("architectures") or []
    if not archs:
        raise ValueError(f"{source}: no 'architectures' entry; supported: {sorted(ARCHITECTURES)}")
    arch = archs[0]
    family = model_class(arch, source).family
    gemma3 = family == "gemma3"
    if gemma3:
        raw = {**_GEMMA3_DEFAULTS, **{k: v for k, v in raw.items() if v is not None}}
    act_key = "hidden_activation" if "hidden_activation" in raw else "hidden_act"
    act = raw.get(act_key, "silu")
    if act not in ACTIVATIONS:
        raise ValueError(f"{source}: {act_key} {act!r} is not supported (supported: {sorted(ACTIVATIONS)})")
    heads = raw["num_attention_heads"]
    theta, scaling = _rope(raw)
    window = raw.get("sliding_window")
    if arch.startswith("Qwen") and not raw.get("use_sliding_window", False):
        window = None  # Qwen2/3 configs carry a window size but only use it when enabled
    eos = raw.get("eos_token_id")
    head_dim = raw.get("head_dim") or raw["hidden_size"] // heads
    if family == "deepseek_v2":
        head_dim = raw["qk_nope_head_dim"] + raw["qk_rope_head_dim"]
    return ModelConfig(
        architecture=arch,
        family=family,
        vocab_size=raw["vocab_size"],
        hidden_size=raw["hidden_size"],
        intermediate_size=raw["intermediate_size"],
        num_hidden_layers=raw["num_hidden_layers"],
        num_attention_heads=heads,
        num_key_value_heads=raw.get("num_key_value_heads") or heads,
        head_dim=head_dim,
        max_position_embeddings=raw.get("max_position_embeddings", 2048),
        rms_norm_eps=raw.get("rms_norm_eps", 1e-6),
        rope_theta=theta,
        rope_scaling=scaling,
        tie_word_embeddings=raw.get("tie_word_embeddings", False),
        qkv_bias=arch == "Qwen2ForCausalLM" or raw.get("attention_bias", False),
        o_bias=arch != "Qwen2ForCausalLM" and raw.get("attention_bias", False),
        mlp_bias=raw.get("mlp_bias", False),
        sliding_window=window or 0,
        bos_token_id=raw.get("bos_token_id"),
        eos_token_id=[] if eos is None else ([eos] if isinstance(eos, int) else list(eos)),
        hidden_act=act,
        qk_norm=arch == "Qwen3ForCausalLM" or gemma3,
        raw=raw,
        **(_gemma3_fields(raw, source) if gemma3 else {}),
    )


def load_config(directory: str | Path) -> ModelConfig:
    path = Path(directory) / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no config.json in the model directory")
    return parse_config(json.loads(path.read_text()), str(path))
