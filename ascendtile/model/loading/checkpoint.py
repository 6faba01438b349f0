"""Stream checkpoint tensors into a model built with uninitialised parameters.

Checkpoint names are HF's; a merged Linear (qkv_proj, gate_up_proj) takes `<prefix>.<shard>.<param>`
into its rows. A checkpoint tensor arrives unread (a `CheckpointTensor`: its shape, and a `read`
of all of it or of a range along one dim) and is read and copied into its parameter one at a
time, so no second full copy of the weights is ever held. Under tensor parallelism a module's
`checkpoint_slice(param, shard)` names the part of a checkpoint tensor this rank keeps (dim,
start, the checkpoint's size along dim): only that part is read from the file. A padded share
(the vocabulary) that runs past the checkpoint's end is zero there. Errors name the file and
the tensor.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Iterable, Iterator, NamedTuple, Protocol

import torch
from safetensors import safe_open
from torch import nn

from ascendtile.model.layers.linear import Linear


# Integer parameter dtypes (quantized weights), which a checkpoint must match exactly.
_INTEGER_PARAMS = {torch.int8: "int8 (W8A8)", torch.uint8: "uint8 (W4A16 packed 4-bit values)"}


class CheckpointTensor(Protocol):
    """A tensor of a checkpoint file, not read yet."""
    shape: tuple[int, ...]

    def read(self, part: tuple[int, int, int] | None) -> torch.Tensor:
        """The whole tensor (part None) or `length` entries from `start` along `dim` (part =
        (dim, start, length)), read from the file."""


class SafetensorsTensor:
    """A safetensors tensor read through `safe_open(...).get_slice`: a part reads only its bytes."""

    def __init__(self, handle, name: str) -> None:
        self.slice = handle.get_slice(name)
        self.shape = tuple(self.slice.get_shape())

    def read(self, part: tuple[int, int, int] | None) -> torch.Tensor:
        if part is None:
            return self.slice[...]
        dim, start, length = part
        return self.slice[(slice(None),) * dim + (slice(start, start + length),)]


def safetensors_tensors(directory: Path) -> Iterator[tuple[str, str, SafetensorsTensor]]:
    """(file, name, unread tensor) for every tensor of the checkpoint in `directory` (its
    model.safetensors.index.json's files, else every *.safetensors); the file stays open while
    its tensors are consumed."""
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
                yield str(path), name, SafetensorsTensor(f, name)


class _Target(NamedTuple):
    param: torch.Tensor
    offset: int  # first row in param (merged shards); 0 otherwise
    rows: int  # rows of param this tensor fills; -1 = the whole parameter
    part: tuple[int, int, int] | None = None  # (dim, start, checkpoint size along dim) kept by this rank


def _part(module: nn.Module, param_name: str, shard: str | None) -> tuple[int, int, int] | None:
    slicer = getattr(module, "checkpoint_slice", None)
    return None if slicer is None else slicer(param_name, shard)


def _targets(model: nn.Module) -> dict[str, _Target]:
    targets = {name: _Target(p, 0, -1) for name, p in model.named_parameters()}
    for prefix, module in model.named_modules():
        merged = isinstance(module, Linear) and module.shard_names
        for param_name, param in module.named_parameters(recurse=False):
            name = f"{prefix}.{param_name}" if prefix else param_name
            if not merged:
                targets[name] = _Target(param, 0, -1, _part(module, param_name, None))
                continue
            del targets[name]
            parent = prefix.rpartition(".")[0]
            for shard, (offset, rows) in module.shard_offsets().items():
                whole = param_name == "input_scale"  # one activation feeds every shard
                targets[f"{parent}.{shard}.{param_name}"] = _Target(param, 0 if whole else offset, -1 if whole else rows,
                                                                    _part(module, param_name, shard))
    return targets


def load_weights(model: nn.Module, tensors: Iterable[tuple[str, str, CheckpointTensor]], source: str,
                 dtype: torch.dtype) -> None:
    """Read (file, name, tensor) triples into `model`, float tensors cast to `dtype` (quantized
    weights and their fp32 scales and mins keep theirs); raise ValueError on an unexpected name, a shape or dtype
    mismatch, or, at the end, any parameter the checkpoint did not provide."""
    targets = _targets(model)
    tied = getattr(getattr(model, "config", None), "tie_word_embeddings", False)
    filled: set[str] = set()
    with torch.no_grad():
        for file, name, tensor in tensors:
            if name not in targets:
                if tied and name == "lm_head.weight" or name.endswith("rotary_emb.inv_freq"):
                    continue  # tied head duplicates the embedding; rope tables are rebuilt
                raise ValueError(f"{file}: unexpected tensor {name!r} (no such parameter in {type(model).__name__})")
            _copy(file, name, tensor, targets[name], dtype)
            filled.add(name)
    missing = sorted(set(targets) - filled)
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise ValueError(f"{source}: missing weight(s) {shown}")


def _copy(file: str, name: str, source: CheckpointTensor, target: _Target, dtype: torch.dtype) -> None:
    param, offset, rows, part = target
    dest = param if rows < 0 else param[offset: offset + rows]
    scale = name.endswith(("weight_scale", "input_scale"))
    shape = (math.prod(source.shape),) if scale else tuple(source.shape)  # compressed-tensors: [N, 1] / [1]
    read = None
    if part is not None:
        dim, start, size = part
        expected = dest.shape[:dim] + (size,) + dest.shape[dim + 1:]  # the checkpoint's shape
        length = max(0, min(dest.shape[dim], size - start))  # short of dest's rows in a padded share
        dest.narrow(dim, length, dest.shape[dim] - length).zero_()
        dest, read = dest.narrow(dim, 0, length), (dim, start, length)
    else:
        expected = dest.shape
    if shape != tuple(expected):
        raise ValueError(f"{file}: tensor {name!r} has shape {tuple(source.shape)}, expected {tuple(expected)}")
    tensor = source.read(read)
    if scale:
        tensor = tensor.reshape(-1)
    if tuple(tensor.shape) != tuple(dest.shape):  # a reader returning other than its header said
        raise ValueError(f"{file}: tensor {name!r} read as shape {tuple(tensor.shape)}, expected {tuple(dest.shape)}")
    integer = _INTEGER_PARAMS.get(param.dtype)
    if (integer is not None or tensor.dtype in _INTEGER_PARAMS) and tensor.dtype != param.dtype:
        raise ValueError(f"{file}: tensor {name!r} has dtype {tensor.dtype}, the model expects "
                         f"{integer or 'a float dtype'}")
    if param.dtype == dtype:  # W8A8 / W4A16 scales and mins stay fp32, quantized weights integer
        tensor = tensor.to(dtype)
    checkpoint_offset = getattr(param, "checkpoint_offset", 0.0)
    if checkpoint_offset:
        tensor = tensor.float() + checkpoint_offset  # Gemma's (1 + w) norm weights, rounded once into param
    if name.endswith("input_scale"):
        # Merged shards (q/k/v) each carry a scale for the same activation: keep the largest
        # (the shell starts at 0), so no shard's calibrated range is clipped.
        tensor = torch.maximum(dest, tensor.to(dest))
    dest.copy_(tensor)
