"""load_model: an embedded model by name, an HF directory, or a .gguf file -> LoadedModel."""
from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import torch
from safetensors import safe_open
from torch import nn

from ascendkit.distributed import tp_size
from ascendkit.model.architectures.model_config import ModelConfig
from ascendkit.model.architectures.registry import model_class
from ascendkit.model.loading.checkpoint import load_weights
from ascendkit.model.loading.config import load_config
from ascendkit.model.loading.embedded import EMBEDDED_MODELS, embedded_model_path
from ascendkit.model.loading.gguf_loader import GGUFFile
from ascendkit.model.loading.w8a8 import checkpoint_is_w8a8, prepare_w8a8_shells, quantize_w8a8
from ascendkit.model.tokenizers.tokenizer import Tokenizer


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


def _safetensors(directory: Path, names_only: bool = False) -> Iterator[tuple[str, str, torch.Tensor | None]]:
    """(file, name, tensor) for every tensor of the checkpoint, read one at a time."""
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    else:
        files = sorted(p.name for p in directory.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{directory}: no *.safetensors weights")
    for file in files:
        path = directory / file
        try:
            handle = safe_open(str(path), framework="pt")
        except Exception as exc:
            raise ValueError(f"{path}: cannot read safetensors file ({exc})") from exc
        with handle as f:
            for name in f.keys():
                yield str(path), name, None if names_only else f.get_tensor(name)


def _cast(tensors, dtype: torch.dtype, device) -> Iterator[tuple[str, str, torch.Tensor]]:
    for file, name, t in tensors:
        keep = t.dtype == torch.int8 or name.endswith(("weight_scale", "input_scale"))
        yield file, name, t.to(device=device, dtype=t.dtype if keep else dtype)


def load_model(model: str, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu",
               quantization: str | None = None) -> LoadedModel:
    """Load an embedded model by name ("default" = SmolLM2-135M-Instruct, "gemma3-270m"), an HF
    directory (config.json, *.safetensors, tokenizer.json) or a .gguf file (Llama or Gemma 3 arch).
    quantization="w8a8" converts every Linear but the LM head to W8A8 with dynamic activation
    scales after loading. Inside a tensor-parallel group (ascendkit.distributed) each rank builds
    and loads only its shard; W8A8 is not sharded yet."""
    if quantization not in (None, "w8a8"):
        raise ValueError(f"quantization: must be None or 'w8a8', got {quantization!r}")
    if quantization == "w8a8" and tp_size() > 1:
        raise NotImplementedError("quantization='w8a8' is not implemented with tensor parallelism")
    path = Path(embedded_model_path(model) if model in EMBEDDED_MODELS else model)
    if path.is_dir():
        config = load_config(path)
        if checkpoint_is_w8a8(config.raw) and tp_size() > 1:
            raise NotImplementedError(f"{path}: W8A8 checkpoints are not implemented with tensor parallelism")
        net = build_model(config, dtype, device)
        if checkpoint_is_w8a8(config.raw):
            prepare_w8a8_shells(net, {name for _, name, _ in _safetensors(path, names_only=True)})
        load_weights(net, _cast(_safetensors(path), dtype, device), str(path))
        tokenizer = Tokenizer.from_directory(path, config.eos_token_id) if (path / "tokenizer.json").is_file() else None
    elif path.suffix == ".gguf" and path.is_file():
        gguf = GGUFFile(path)
        config = gguf.config()
        net = build_model(config, dtype, device)
        load_weights(net, _cast(gguf.tensors(dtype), dtype, device), str(path))
        tokenizer = Tokenizer.from_gguf_metadata(gguf.metadata, str(path))
    else:
        raise FileNotFoundError(f"model: {model!r} is not an embedded model name {sorted(EMBEDDED_MODELS)}, "
                                "a model directory or a .gguf file")
    net.post_load()
    if quantization == "w8a8" and not checkpoint_is_w8a8(config.raw):
        quantize_w8a8(net)
    return LoadedModel(net.eval(), tokenizer, config)
