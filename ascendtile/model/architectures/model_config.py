"""ModelConfig: the HF config.json fields the architectures read (built by
loading/config.py's parse_config from a config.json or from GGUF metadata). `raw` keeps the
whole config.json: an architecture's own extra fields are read from it with `get`."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class ModelConfig:
    architecture: str  # architectures[0] of config.json, a key of registry.ARCHITECTURES
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
    hidden_act: str = "silu"  # a key of layers/mlp.py's ACTIVATIONS
    # Per-layer "sliding_attention" / "full_attention" (Gemma 3); empty: every layer uses
    # sliding_window and rope_theta as above.
    layer_types: list[str] = field(default_factory=list)
    local_rope_theta: float = 10000.0  # rope base of the sliding layers when layer_types is set
    attention_scale: float | None = None  # softmax scale; None = head_dim ** -0.5
    final_logit_softcapping: float = 0.0  # 0 = off
    bos_token_id: int | None = None
    eos_token_id: list[int] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict, repr=False)  # the whole config.json (DeepSeek fields etc.)
    family: str = ""  # the registered class's `family` ("llama", "gemma3", ...), set by parse_config

    def get(self, key: str, default: Any = None) -> Any:
        return self.raw.get(key, default)
