"""Stream checkpoint tensors into a model built with uninitialised parameters.

Checkpoint names are HF's; a merged Linear (qkv_proj, gate_up_proj) takes `<prefix>.<shard>.<param>`
into its rows. Each tensor is copied into its parameter as it arrives, so no second full copy of
the weights is ever held. Under tensor parallelism a module's `checkpoint_slice(param, shard)`
names the part of a checkpoint tensor this rank keeps (dim, start, the checkpoint's size along
dim): only that part is copied. Errors name the file and the tensor.
"""
from __future__ import annotations

from typing import Iterable, NamedTuple

import torch
from torch import nn

from ascendkit.model.layers.linear import Linear


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


def load_weights(model: nn.Module, tensors: Iterable[tuple[str, str, torch.Tensor]], source: str) -> None:
    """Copy (file, name, tensor) triples into `model`; raise ValueError on an unexpected name, a
    shape or dtype mismatch, or, at the end, any parameter the checkpoint did not provide."""
    targets = _targets(model)
    tied = getattr(getattr(model, "config", None), "tie_word_embeddings", False)
    filled: set[str] = set()
    with torch.no_grad():
        for file, name, tensor in tensors:
            if name not in targets:
                if tied and name == "lm_head.weight" or name.endswith("rotary_emb.inv_freq"):
                    continue  # tied head duplicates the embedding; rope tables are rebuilt
                raise ValueError(f"{file}: unexpected tensor {name!r} (no such parameter in {type(model).__name__})")
            _copy(file, name, tensor, targets[name])
            filled.add(name)
    missing = sorted(set(targets) - filled)
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise ValueError(f"{source}: missing weight(s) {shown}")


def _copy(file: str, name: str, tensor: torch.Tensor, target: _Target) -> None:
    param, offset, rows, part = target
    if (param.dtype == torch.int8) != (tensor.dtype == torch.int8):
        raise ValueError(f"{file}: tensor {name!r} has dtype {tensor.dtype}, the model expects "
                         f"{'int8 (W8A8)' if param.dtype == torch.int8 else 'a float dtype'}")
    if name.endswith(("weight_scale", "input_scale")):
        tensor = tensor.reshape(-1)  # compressed-tensors stores [N, 1] / [1]
    checkpoint_offset = getattr(param, "checkpoint_offset", 0.0)
    if checkpoint_offset:
        tensor = tensor.float() + checkpoint_offset  # Gemma's (1 + w) norm weights, rounded once into param
    dest = param if rows < 0 else param[offset: offset + rows]
    if part is not None:
        dim, start, size = part
        whole = dest.shape[:dim] + (size,) + dest.shape[dim + 1:]  # the checkpoint's shape
        if tuple(tensor.shape) != tuple(whole):
            raise ValueError(f"{file}: tensor {name!r} has shape {tuple(tensor.shape)}, expected {tuple(whole)}")
        tensor = tensor.narrow(dim, start, dest.shape[dim])
    if tuple(tensor.shape) != tuple(dest.shape):
        raise ValueError(f"{file}: tensor {name!r} has shape {tuple(tensor.shape)}, expected {tuple(dest.shape)}")
    if name.endswith("input_scale"):
        # Merged shards (q/k/v) each carry a scale for the same activation: keep the largest
        # (the shell starts at 0), so no shard's calibrated range is clipped.
        tensor = torch.maximum(dest, tensor.to(dest))
    dest.copy_(tensor)
