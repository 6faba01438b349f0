"""load_model: an embedded model by name, an HF directory, or a .gguf file -> LoadedModel; what such
a name points to (`model_path`) and its chat template (`chat_template`), found without loading."""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ascendtile.huge_pages import back_with_huge_pages
from ascendtile.model.architectures.model_config import ModelConfig
from ascendtile.model.architectures.registry import model_class
from ascendtile.model.loading.checkpoint import load_weights, safetensors_tensors
from ascendtile.model.loading.config import load_config
from ascendtile.model.loading.embedded import EMBEDDED_MODELS, embedded_model_path
from ascendtile.model.loading.gguf_loader import GGUFFile
from ascendtile.model.loading.gguf_w4a16 import GROUP_SIZE as GGUF_GROUP_SIZE
from ascendtile.model.loading.w4a16 import default_group_size, prepare_w4a16_shells, quantize_w4a16
from ascendtile.model.loading.w4a16_checkpoint import checkpoint_w4a16_scheme, packed_groups, w4a16_tensors
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
    """The model with uninitialised parameters, created directly on `device` in `dtype`; on CPU their
    memory is asked for huge pages before the weights are written into it (huge_pages.py)."""
    with _default_dtype(dtype), torch.device(device):
        net = model_class(config.architecture)(config)
    back_with_huge_pages(net.parameters(), collapse=False)
    return net


QUANTIZATIONS = ("w8a8", "w4a16")


def check_quantization(quantization: str | None) -> None:
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise ValueError(f"quantization: must be None or one of {list(QUANTIZATIONS)}, got {quantization!r}")


def default_dtype(quantization: str | None) -> torch.dtype:
    """The model dtype when the caller gives none: float32, except bfloat16 for W4A16. W4A16 means
    4-bit weights with 16-bit activations (vLLM's W4A16 kernels take fp16/bf16 activations only),
    and on CPU its fast path is torch's int4 kernel, which is vectorised for bf16 activations only
    (model/layers/int4pack.py); float32 stays available by asking for it and runs every W4A16
    linear through the exact op (the fp32 dequantized weights, fp32 accumulation)."""
    return torch.bfloat16 if quantization == "w4a16" else torch.float32


def load_model(model: str, dtype: torch.dtype | None = None, device: str | torch.device = "cpu",
               quantization: str | None = None) -> LoadedModel:
    """Load an embedded model by name ("default" = SmolLM2-135M-Instruct, "gemma3-270m"), an HF
    directory (config.json, *.safetensors, tokenizer.json) or a .gguf file (Llama or Gemma 3 arch).
    dtype None: default_dtype(quantization) (float32; bfloat16 for W4A16).

    quantization="w8a8" converts every Linear but the LM head to W8A8 with dynamic activation
    scales after loading. quantization="w4a16" (model/loading/w4a16.py): a GGUF's Q4_0 / Q4_1 /
    Q4_K linear weights load as they are (a merged q/k/v or gate/up only when all its tensors are
    4-bit; the rest, embeddings and LM head included, load float as usual); a float checkpoint is
    quantized round-to-nearest per group (asymmetric, the first of 128 / 64 / 32 dividing every
    Linear's inputs), all but the LM head. A compressed-tensors W8A8 (int-quantized) or W4A16
    (pack-quantized) checkpoint loads quantized whatever `quantization` says.
    Inside a tensor-parallel group (ascendtile.distributed) each rank builds its shard and reads
    only that shard's part of each tensor from the file; W8A8 and W4A16 (a checkpoint, or converted
    here, each rank quantizing its own shard) shard like the float weights."""
    check_quantization(quantization)
    dtype = default_dtype(quantization) if dtype is None else dtype
    path = model_path(model)
    if path.is_dir():
        config = load_config(path)
        net = build_model(config, dtype, device)
        tensors = safetensors_tensors(path)
        scheme = checkpoint_w4a16_scheme(config.raw)
        if checkpoint_is_w8a8(config.raw):
            prepare_w8a8_shells(net, {name for _, name, _ in safetensors_tensors(path)})
        elif scheme is not None:
            prepare_w4a16_shells(net, packed_groups(safetensors_tensors(path), scheme), dtype)
            tensors = w4a16_tensors(tensors, scheme)
        load_weights(net, tensors, str(path), dtype)
        tokenizer = Tokenizer.from_directory(path, config.eos_token_id) if (path / "tokenizer.json").is_file() else None
        float_checkpoint = scheme is None and not checkpoint_is_w8a8(config.raw)
    else:
        gguf = GGUFFile(path)
        config = gguf.config()
        net = build_model(config, dtype, device)
        int4 = set()
        if quantization == "w4a16":
            groups = {name.removesuffix(".weight"): GGUF_GROUP_SIZE for name in gguf.int4_weights()}
            int4 = {f"{layer}.weight" for layer in prepare_w4a16_shells(net, groups, dtype)}
        load_weights(net, gguf.tensors(int4), str(path), dtype)
        tokenizer = Tokenizer.from_gguf_metadata(gguf.metadata, str(path))
        float_checkpoint = quantization != "w4a16"
    net.post_load()
    if float_checkpoint and quantization == "w8a8":
        quantize_w8a8(net)
    elif float_checkpoint and quantization == "w4a16":
        quantize_w4a16(net, default_group_size(net))
    back_with_huge_pages([*net.parameters(), *net.buffers()])  # what was written before the advice, or since
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
