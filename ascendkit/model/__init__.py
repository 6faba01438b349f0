"""Model zoo on torch.ops.ascend: LlamaForCausalLM (Llama 2/3, SmolLM2, Mistral, Qwen2, Qwen3),
DeepseekV2ForCausalLM (MLA, dense/MoE), loaders (HF safetensors dirs, GGUF), W8A8, tokenizer."""
from ascendkit.model.attention_metadata import AttentionMetadata
from ascendkit.model.config import ModelConfig, load_config, parse_config
from ascendkit.model.detokenizer import IncrementalDetokenizer
from ascendkit.model.embedded import EMBEDDED_MODELS, default_model_path, embedded_model_path
from ascendkit.model.loader import LoadedModel, build_model, load_model
from ascendkit.model.tokenizer import Tokenizer
from ascendkit.model.w8a8 import quantize_w8a8, save_w8a8

__all__ = [
    "AttentionMetadata", "EMBEDDED_MODELS", "IncrementalDetokenizer", "LoadedModel", "ModelConfig", "Tokenizer", "build_model",
    "default_model_path", "embedded_model_path", "load_config", "load_model", "parse_config", "quantize_w8a8", "save_w8a8",
]
