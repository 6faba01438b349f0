"""The supported architectures: `architectures[0]` of an HF config.json -> the class that
implements it. Config validation (loading/config.py) and the loader's class choice
(loading/loader.py) both read this table; adding an architecture is its file in this folder
and one line here."""
from __future__ import annotations

from ascendtile.model.architectures.base import CausalLM
from ascendtile.model.architectures.deepseek_v2 import DeepseekV2ForCausalLM
from ascendtile.model.architectures.gemma3 import Gemma3ForCausalLM
from ascendtile.model.architectures.llama import LlamaForCausalLM

ARCHITECTURES: dict[str, type[CausalLM]] = {
    "LlamaForCausalLM": LlamaForCausalLM,
    "MistralForCausalLM": LlamaForCausalLM,
    "Qwen2ForCausalLM": LlamaForCausalLM,
    "Qwen3ForCausalLM": LlamaForCausalLM,
    "DeepseekV2ForCausalLM": DeepseekV2ForCausalLM,
    "Gemma3ForCausalLM": Gemma3ForCausalLM,
}

# Known names that are refused with a reason, rather than as merely unknown.
REFUSED: dict[str, str] = {
    "Gemma3ForConditionalGeneration": "Gemma 3 with its vision tower (multimodal) is not supported; "
                                      "only text-only Gemma 3 checkpoints (Gemma3ForCausalLM) are",
}


def model_class(architecture: str, source: str = "config.json") -> type[CausalLM]:
    """The class for an `architectures[0]` name; ValueError naming `source` and listing the
    supported names for any other."""
    if architecture in REFUSED:
        raise ValueError(f"{source}: architecture {architecture!r}: {REFUSED[architecture]}")
    if architecture not in ARCHITECTURES:
        raise ValueError(f"{source}: unknown architecture {architecture!r}; supported: {sorted(ARCHITECTURES)}")
    return ARCHITECTURES[architecture]
