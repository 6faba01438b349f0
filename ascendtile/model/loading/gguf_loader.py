"""GGUF files (llama.cpp; architectures llama and gemma3): config and tensors in HF layout.

Tensors are dequantized one at a time with the gguf package, each only as far as the part a
tensor-parallel rank keeps (GGUFTensor.dequantize). For llama, llama.cpp's converter
permutes the rows of attn_q / attn_k so that rope rotates interleaved pairs; HF (and our neox
rope) rotate halves, so those rows are permuted back. attn_v is not permuted. For gemma3 nothing
is permuted, but every norm weight is stored as 1 + w (HF's checkpoints hold w), so 1 is
subtracted to give HF's tensors, as transformers' own GGUF loader does. A file without
`output.weight` ties the LM head to token_embd. Rope scaling comes from <arch>.rope.scaling.*
(linear, yarn); files with a rope_freqs tensor (Llama 3.1 per-frequency factors) are refused.
Gemma 3 fields a GGUF does not carry (local rope base, layer pattern, query_pre_attn_scalar)
take HF's Gemma3TextConfig defaults, as transformers does.
W4A16 (load_model(quantization="w4a16")): the 4-bit tensors of the linears the loader made W4A16
shells are read as their three parameters `<layer>.qweight`, `.scales`, `.mins` decoded from the
file's bytes (gguf_w4a16.py), un-permuted like the float rows; every other tensor as above.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Collection, Iterator

import numpy as np
import torch

from ascendtile.model.architectures.model_config import ModelConfig
from ascendtile.model.loading.checkpoint import CheckpointTensor
from ascendtile.model.loading.config import parse_config
from ascendtile.model.loading.gguf_reader import GGUFTensor, read_gguf
from ascendtile.model.loading.gguf_w4a16 import INT4_TYPES, int4_parameters, read_int4

_LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
# Names that differ per architecture: llama's ffn_norm is HF's post_attention_layernorm (pre-MLP);
# gemma3 normalises both sides of attention and of the MLP.
_ARCH_LAYER_NAMES = {
    "llama": {"ffn_norm": "post_attention_layernorm"},
    "gemma3": {
        "post_attention_norm": "post_attention_layernorm",
        "ffn_norm": "pre_feedforward_layernorm",
        "post_ffw_norm": "post_feedforward_layernorm",
        "attn_q_norm": "self_attn.q_norm",
        "attn_k_norm": "self_attn.k_norm",
    },
}
_HF_ARCHITECTURES = {"llama": "LlamaForCausalLM", "gemma3": "Gemma3ForCausalLM"}
_GLOBAL_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}


class GGUFFile:
    """An opened GGUF: metadata dict, tensor list, and the config it describes."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        try:
            self.metadata, self.gguf_tensors = read_gguf(self.path)
        except Exception as exc:  # struct.error, unknown enum values, ... on a corrupt header
            raise ValueError(f"{self.path}: not a valid GGUF file ({type(exc).__name__}: {exc})") from exc
        self.arch = self.metadata.get("general.architecture")
        if self.arch not in _ARCH_LAYER_NAMES:
            raise ValueError(f"{self.path}: GGUF architecture {self.arch!r} is not supported "
                             f"(supported: {sorted(_ARCH_LAYER_NAMES)})")
        self.layer_names = {**_LAYER_NAMES, **_ARCH_LAYER_NAMES[self.arch]}

    def config(self) -> ModelConfig:
        m, p = self.metadata, self.arch + "."
        heads = m[p + "attention.head_count"]
        names = {t.name for t in self.gguf_tensors}
        if "rope_freqs.weight" in names:
            # Llama 3.1-style per-frequency rope factors: the cos/sin builder takes HF rope
            # parameters, which this tensor does not carry; refuse rather than rotate wrongly.
            raise ValueError(f"{self.path}: tensor 'rope_freqs.weight' (per-frequency rope factors) is not supported")
        raw = {
            "architectures": [_HF_ARCHITECTURES[self.arch]],
            "vocab_size": m.get(p + "vocab_size") or len(m["tokenizer.ggml.tokens"]),
            "hidden_size": m[p + "embedding_length"],
            "intermediate_size": m[p + "feed_forward_length"],
            "num_hidden_layers": m[p + "block_count"],
            "num_attention_heads": heads,
            "num_key_value_heads": m.get(p + "attention.head_count_kv", heads),
            "head_dim": m.get(p + "attention.key_length") or m[p + "embedding_length"] // heads,
            "max_position_embeddings": m.get(p + "context_length", 2048),
            "rms_norm_eps": float(m.get(p + "attention.layer_norm_rms_epsilon", 1e-5)),
            "rope_theta": float(m.get(p + "rope.freq_base", 10000.0)),
            "rope_scaling": _rope_scaling(m, p),
            "tie_word_embeddings": "output.weight" not in names,
            "bos_token_id": m.get("tokenizer.ggml.bos_token_id"),
            "eos_token_id": m.get("tokenizer.ggml.eos_token_id"),
            "sliding_window": m.get(p + "attention.sliding_window"),
        }
        return parse_config(raw, self.path)

    def int4_weights(self) -> set[str]:
        """HF names of the 2-D Q4_0 / Q4_1 / Q4_K tensors: those that can load as W4A16."""
        return {_hf_name(t.name, self.layer_names) for t in self.gguf_tensors
                if t.tensor_type in INT4_TYPES and len(t.shape) == 2}

    def tensors(self, int4: Collection[str] = ()) -> Iterator[tuple[str, str, CheckpointTensor]]:
        """(file, HF name, unread tensor in HF's layout) for every tensor; a weight named in `int4`
        (from int4_weights) as its W4A16 parameters `<layer>.qweight`, `.scales`, `.mins`."""
        cfg = self.config()
        permuted = ({"q_proj.weight": cfg.num_attention_heads, "k_proj.weight": cfg.num_key_value_heads}
                    if self.arch == "llama" else {})
        for t in self.gguf_tensors:
            name = _hf_name(t.name, self.layer_names)
            norm = self.arch == "gemma3" and name.endswith("norm.weight")
            heads = permuted.get(name.rpartition(".self_attn.")[2], 0)
            tensor = GGUFCheckpointTensor(self.path, t, heads, norm)
            if name not in int4:
                yield self.path, name, tensor
                continue
            layer = name.removesuffix(".weight")
            for param, part in int4_parameters(tensor).items():
                yield self.path, f"{layer}.{param}", part


class GGUFCheckpointTensor:
    """One GGUF tensor as HF holds it (checkpoint.CheckpointTensor): llama's q/k rows permuted
    back, gemma3's norms less 1. A part is dequantized from its own rows or blocks; a part of
    permuted q/k rows is read alone only when it is whole heads (the permutation stays within a
    head), else the whole tensor is read and narrowed."""

    def __init__(self, path: str, tensor: GGUFTensor, permuted_heads: int, norm: bool) -> None:
        """permuted_heads: llama.cpp's head count of a q/k weight whose rows to permute back, 0 for none."""
        self.path, self.tensor, self.shape = path, tensor, tensor.shape
        self.permuted_heads, self.norm = permuted_heads, norm

    def _whole_heads(self, part: tuple[int, int, int] | None) -> bool:
        """Whether `part` can be read alone: not rows of permuted q/k that split a head."""
        head_rows = self.shape[0] // self.permuted_heads if self.permuted_heads else 1
        return part is None or part[0] != 0 or (part[1] % head_rows == 0 and part[2] % head_rows == 0)

    def read(self, part: tuple[int, int, int] | None) -> torch.Tensor:
        if not self._whole_heads(part):
            return self.read(None).narrow(*part)
        try:
            array = self.tensor.dequantize(part)
        except Exception as exc:
            raise ValueError(f"{self.path}: tensor {self.tensor.name!r} cannot be dequantized ({exc})") from exc
        if part is None and tuple(array.shape) != self.shape:
            raise ValueError(f"{self.path}: tensor {self.tensor.name!r} has data shaped {array.shape}, "
                             f"header says {self.shape}")
        if self.norm:
            array = array - 1.0  # stored as 1 + w
        elif self.permuted_heads:
            array = _unpermute(array, self.permuted_heads * array.shape[0] // self.shape[0])
        # copies what is still a view of the read-only memmap (float types), not a fresh dequantization
        return torch.from_numpy(np.require(array, np.float32, ["WRITEABLE"]))

    def read_int4(self, part: tuple[int, int, int] | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """read()'s part of a 4-bit tensor as W4A16 (qweight, scales, mins) (gguf_w4a16.read_int4,
        no float copy), permuted q/k rows put back in all three alike."""
        if not self._whole_heads(part):
            return tuple(t.narrow(*part) for t in self.read_int4(None))
        try:
            arrays = read_int4(self.tensor, part)
        except ValueError as exc:
            raise ValueError(f"{self.path}: {exc}") from exc
        if self.permuted_heads:
            arrays = [_unpermute(a, self.permuted_heads * a.shape[0] // self.shape[0]) for a in arrays]
        return tuple(torch.from_numpy(np.ascontiguousarray(a)) for a in arrays)


def _rope_scaling(m: dict[str, Any], p: str) -> dict | None:
    """llama.rope.scaling.* metadata as an HF rope-scaling dict (linear / yarn), None if absent."""
    kind = m.get(p + "rope.scaling.type", "none")
    if kind == "none":
        return None
    scaling = {"rope_type": kind, "factor": float(m[p + "rope.scaling.factor"])}
    if p + "rope.scaling.original_context_length" in m:
        scaling["original_max_position_embeddings"] = m[p + "rope.scaling.original_context_length"]
    return scaling


def _hf_name(gguf_name: str, layer_names: dict[str, str]) -> str:
    base, _, param = gguf_name.rpartition(".")
    match = re.fullmatch(r"blk\.(\d+)\.(\w+)", base)
    if match and match.group(2) in layer_names:
        return f"model.layers.{match.group(1)}.{layer_names[match.group(2)]}.{param}"
    if base in _GLOBAL_NAMES:
        return f"{_GLOBAL_NAMES[base]}.{param}"
    return gguf_name  # unknown: the weight loader reports it as unexpected


def _unpermute(w: np.ndarray, heads: int) -> np.ndarray:
    """Undo llama.cpp's per-head row order (pairs interleaved) back to HF's (halves)."""
    rows = w.shape[0]
    return w.reshape(heads, rows // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)
