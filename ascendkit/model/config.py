"""ModelConfig: the fields of an HF config.json the model zoo reads, normalised across
transformers 4.x (`rope_theta` + `rope_scaling`) and 5.x (`rope_parameters`) spellings."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# architectures[0] in config.json -> the model zoo family that implements it.
ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "llama",
    "Qwen2ForCausalLM": "llama",
    "Qwen3ForCausalLM": "llama",
    "DeepseekV2ForCausalLM": "deepseek_v2",
}


@dataclass
class ModelConfig:
    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    max_position_embeddings: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: dict | None = None  # HF rope parameters without rope_theta; None = default rope
    tie_word_embeddings: bool = False
    qkv_bias: bool = False  # Qwen2 (always), Llama's attention_bias
    o_bias: bool = False
    qk_norm: bool = False  # Qwen3: per-head RMSNorm on q and k before rope
    mlp_bias: bool = False
    sliding_window: int = 0  # 0 = full attention (unified_attention convention)
    bos_token_id: int | None = None
    eos_token_id: list[int] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict, repr=False)  # the whole config.json (DeepSeek fields etc.)

    @property
    def family(self) -> str:
        return ARCHITECTURES[self.architecture]

    def get(self, key: str, default: Any = None) -> Any:
        return self.raw.get(key, default)


def _rope(raw: dict) -> tuple[float, dict | None]:
    params = dict(raw.get("rope_parameters") or raw.get("rope_scaling") or {})
    theta = float(params.pop("rope_theta", raw.get("rope_theta", 10000.0)))
    kind = params.get("rope_type", params.get("type", "default"))
    return theta, (params if kind != "default" else None)


def parse_config(raw: dict, source: str = "config.json") -> ModelConfig:
    """Build a ModelConfig from a config.json dict; `source` names the file in errors."""
    archs = raw.get("architectures") or []
    if not archs:
        raise ValueError(f"{source}: no 'architectures' entry; supported: {sorted(ARCHITECTURES)}")
    arch = archs[0]
    if arch not in ARCHITECTURES:
        raise ValueError(f"{source}: unknown architecture {arch!r}; supported: {sorted(ARCHITECTURES)}")
    if raw.get("hidden_act", "silu") != "silu":
        raise ValueError(f"{source}: hidden_act {raw['hidden_act']!r} is not supported (only silu)")
    heads = raw["num_attention_heads"]
    theta, scaling = _rope(raw)
    window = raw.get("sliding_window")
    if arch.startswith("Qwen") and not raw.get("use_sliding_window", False):
        window = None  # Qwen2/3 configs carry a window size but only use it when enabled
    eos = raw.get("eos_token_id")
    head_dim = raw.get("head_dim") or raw["hidden_size"] // heads
    if ARCHITECTURES[arch] == "deepseek_v2":
        head_dim = raw["qk_nope_head_dim"] + raw["qk_rope_head_dim"]
    return ModelConfig(
        architecture=arch,
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
        qk_norm=arch == "Qwen3ForCausalLM",
        mlp_bias=raw.get("mlp_bias", False),
        sliding_window=window or 0,
        bos_token_id=raw.get("bos_token_id"),
        eos_token_id=[] if eos is None else ([eos] if isinstance(eos, int) else list(eos)),
        raw=raw,
    )


def load_config(directory: str | Path) -> ModelConfig:
    path = Path(directory) / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no config.json in the model directory")
    return parse_config(json.loads(path.read_text()), str(path))
