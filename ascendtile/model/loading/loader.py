"""load_model: an embedded model by name, an HF directory, or a .gguf file -> LoadedModel; what such
a name points to (`model_path`) and its chat template (`chat_template`), found without loading."""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ascendtile.model.architectures.model_config import ModelConfig
from ascendtile.model.architectures.registry import model_class
from ascendtile.model.loading.checkpoint import load_weights, safetensors_tensors
from ascendtile.model.loading.config import load_config
from ascendtile.model.loading.embedded import EMBEDDED_MODELS, embedded_model_path
from ascendtile.model.loading.gguf_loader import GGUFFile
from ascendtile.model.loading.w8a8 import checkpoint_is_w8a8, prepare_w8a8_shells, quantize_w8a8
from ascendtile.model.tokenizers.tokenizer import Tokenizer, directory_chat_template


@dataclass
class LoadedModel:
    model: nn.Module  # the registry's class for the architecture, KV cache not yet allocated
    tokenizer: Tokenizer | None  # None for a directory without tokenizer.json
    config: ModelConfig


@contextmanager
def _default_dtype(dtype: torch.dtype):
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def build_model(config: ModelConfig, dtype: torch.dtype, device: str | torch.device) -> nn.Module:
    """The model with uninitialised parameters, created directly on `device` in `dtype`."""
    with _default_dtype(dtype), torch.device(device):
        return model_class(config.architecture)(config)


def load_model(model: str, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu",
               quantization: str | None = None) -> LoadedModel:
    """Load an embedded model by name ("default" = SmolLM2-135M-Instruct, "gemma3-270m"), an HF
    directory (config.json, *.safetensors, tokenizer.json) or a .gguf file (Llama or Gemma 3 arch).
    quantization="w8a8" converts every Linear but the LM head to W8A8 with dynamic activation
    scales after loading. Inside a tensor-parallel group (ascendtile.distributed) each rank builds
    its shard and reads only that shard's part of each tensor from the file; W8A8 (a checkpoint,
    or converted here, each rank quantizing its own shard) shards like the float weights."""
    if quantization not in (None, "w8a8"):
        raise ValueError(f"quantization: must be None or 'w8a8', got {quantization!r}")
    path = model_path(model)
    if path.is_dir():
        config = load_config(path)
        net = build_model(config, dtype, device)
        if checkpoint_is_w8a8(config.raw):
            prepare_w8a8_shells(net, {name for _, name, _ in safetensors_tensors(path)})
        load_weights(net, safetensors_tensors(path), str(path), dtype)
        tokenizer = Tokenizer.from_directory(path, config.eos_token_id) if (path / "tokenizer.json").is_file() else None
    else:
        gguf = GGUFFile(path)
        config = gguf.config()
        net = build_model(config, dtype, device)
        load_weights(net, gguf.tensors(), str(path), dtype)
        tokenizer = Tokenizer.from_gguf_metadata(gguf.metadata, str(path))
    net.post_load()
    if quantization == "w8a8" and not checkpoint_is_w8a8(config.raw):
        quantize_w8a8(net)
    return LoadedModel(net.eval(), tokenizer, config)


def model_path(model: str) -> Path:
    """The file or directory `model` names: an embedded model's GGUF (by name, see
    EMBEDDED_MODELS), an HF directory or a .gguf file; FileNotFoundError naming `model` otherwise."""
    path = Path(embedded_model_path(model) if model in EMBEDDED_MODELS else model)
    if not (path.is_dir() or (path.suffix == ".gguf" and path.is_file())):
        raise FileNotFoundError(f"model: {model!r} is not an embedded model name {sorted(EMBEDDED_MODELS)}, "
                                "a model directory or a .gguf file")
    return path


def chat_template(model: str) -> str | None:
    """The chat template `model`'s tokenizer carries (None: it has none, or there is no tokenizer),
    read from its tokenizer files or GGUF metadata without loading a weight: for callers that
    check before paying for a load."""
    path = model_path(model)
    if path.is_dir():
        return directory_chat_template(path) if (path / "tokenizer.json").is_file() else None
    return GGUFFile(path).metadata.get("tokenizer.chat_template")
