"""Model zoo on torch.ops.ascend.

Architectures (HF `architectures[0]`; architectures/registry.py is the list):
LlamaForCausalLM (Llama 2/3, SmolLM2; also MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM),
Gemma3ForCausalLM (Gemma 3 text: GeGLU, sandwich norms, sliding/full layers),
DeepseekV2ForCausalLM (MLA, dense/MoE).

Parts, importing one way (loading -> architectures -> layers -> ops; tokenizers only each other):
- layers/: attention, MLA, linear (float / W8A8 / W4A16; column/row-parallel), vocab-parallel embedding,
  RMSNorm, gated MLP, MoE, rotary + rope scaling
- architectures/: ModelConfig, the decoder skeleton (base.py), one file per architecture, the
  registry
- loading/: config.json parsing, checkpoint streaming, GGUF reader/loader, embedded models,
  W8A8 and W4A16 quantize/save/load, load_model
- tokenizers/: HF tokenizer.json, GGUF metadata tokenizers, incremental detokenizer
- attention_metadata.py: the flat-batch attention inputs, the runtime <-> model contract
"""
from ascendtile.model.architectures.model_config import ModelConfig
from ascendtile.model.attention_metadata import AttentionMetadata
from ascendtile.model.loading.config import load_config, parse_config
from ascendtile.model.loading.embedded import EMBEDDED_MODELS, default_model_path, embedded_model_path
from ascendtile.model.loading.loader import (LoadedModel, build_model, chat_template, check_quantization, default_dtype,
                                             load_model, model_path)
from ascendtile.model.loading.w4a16 import quantize_w4a16
from ascendtile.model.loading.w4a16_checkpoint import save_w4a16
from ascendtile.model.loading.w8a8 import quantize_w8a8, save_w8a8
from ascendtile.model.tokenizers.detokenizer import IncrementalDetokenizer
from ascendtile.model.tokenizers.tokenizer import Tokenizer

__all__ = [
    "AttentionMetadata", "EMBEDDED_MODELS", "IncrementalDetokenizer", "LoadedModel", "ModelConfig", "Tokenizer", "build_model",
    "chat_template", "check_quantization", "default_dtype", "default_model_path", "embedded_model_path", "load_config",
    "load_model", "model_path", "parse_config", "quantize_w4a16", "quantize_w8a8", "save_w4a16", "save_w8a8",
]
