"""An HF model directory (config.json, model.safetensors, tokenizer files) written from a GGUF
through HF transformers' own GGUF dequantisation: what engines that read only HF directories
(vLLM) load, so they run the same weights as ours and HF's. transformers refuses to save a
model it loaded from GGUF, so the tensors, config and tokenizer are written one by one."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

from ascendtile.bench.hf_gguf import hf_from_gguf


def write_hf_dir(gguf_path: Path, out_dir: Path, dtype: torch.dtype = torch.float32) -> Path:
    """Dequantise gguf_path into out_dir (created, or replaced) in dtype; returns out_dir. Reuses an
    existing out_dir written after gguf_path (the default model's takes seconds and ~0.5 GB in fp32)."""
    config = out_dir / "config.json"
    if config.is_file() and config.stat().st_mtime >= gguf_path.stat().st_mtime:
        return out_dir
    model, tokenizer = hf_from_gguf(gguf_path, dtype)
    partial = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    save_hf_dir(model, tokenizer, partial)
    shutil.rmtree(out_dir, ignore_errors=True)
    partial.rename(out_dir)  # a run killed mid-write never leaves a partial directory to be reused
    return out_dir


def save_hf_dir(model: torch.nn.Module, tokenizer, out_dir: Path) -> Path:
    """An HF causal LM (loaded from a GGUF or not) and its tokenizer into out_dir (created); returns
    out_dir. A tied LM head is written once (as the embedding), as HF checkpoints do."""
    from safetensors.torch import save_file

    out_dir.mkdir(parents=True, exist_ok=True)
    tied = model.config.tie_word_embeddings
    tensors = {name: t.contiguous() for name, t in model.state_dict().items() if not (tied and name == "lm_head.weight")}
    save_file(tensors, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    model.generation_config.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    config = model.config.to_dict()
    config.pop("quantization_config", None)  # the GGUF's: the written tensors are plain floats
    config["architectures"] = [type(model).__name__]
    (out_dir / "config.json").write_text(json.dumps(config, indent=2))
    return out_dir
