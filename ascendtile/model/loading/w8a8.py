"""W8A8: int8 per-channel weights for every Linear except the LM head, with a dynamic (per-token)
or static (calibrated per-tensor) int8 activation scale; save/load in the compressed-tensors
"int-quantized" layout (`<layer>.weight` int8 [N, K], `.weight_scale` [N, 1], `.input_scale` [1]).
Under tensor parallelism a checkpoint's int8 weights shard like float ones (parallel_linear.py:
per-channel scales follow a column-parallel layer's rows and stay whole in a row-parallel one;
static input scales stay whole); quantize_w8a8 on a rank quantizes its own shard, so a
row-parallel layer's per-channel scales span only the rank's columns.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import torch
from safetensors.torch import save_file
from torch import nn

from ascendtile.distributed import tp_size
from ascendtile.model.layers.linear import Linear


def quantizable_linears(model: nn.Module) -> list[tuple[str, Linear]]:
    """(name, module) of every Linear but the LM head, which W8A8 and W4A16 keep float: it is one
    matmul per sampled token and dominates logit accuracy."""
    return [(name, m) for name, m in model.named_modules() if isinstance(m, Linear) and name != "lm_head"]


def _calibrate(model: nn.Module, calibration: Callable[[nn.Module], None]) -> dict[str, float]:
    """max |input| of every Linear while `calibration(model)` runs forward passes."""
    peaks: dict[str, float] = {}

    def hook(name):
        def record(module, args):
            peaks[name] = max(peaks.get(name, 0.0), args[0].detach().abs().max().item())
        return record

    handles = [m.register_forward_pre_hook(hook(name)) for name, m in quantizable_linears(model)]
    try:
        with torch.no_grad():
            calibration(model)
    finally:
        for h in handles:
            h.remove()
    return peaks


@torch.no_grad()
def quantize_w8a8(model: nn.Module, activation: str = "dynamic",
                  calibration: Callable[[nn.Module], None] | None = None) -> nn.Module:
    """Convert every float Linear except lm_head to W8A8 in place and return the model.

    Weights: per output channel, scale = max|w| / 127, q = round-half-even(w / scale). Activations:
    "dynamic" = per-token scale at run time; "static" needs `calibration`, a callable that runs
    representative forward passes on the model (its KV cache allocated); each Linear's input scale
    is then max|x| / 127 over those passes. Linears that never ran during calibration (MLA's
    kv_b_proj, only used absorbed into the attention; experts no calibration token was routed to)
    keep dynamic activation scales.
    """
    if activation not in ("dynamic", "static"):
        raise ValueError(f"activation: must be 'dynamic' or 'static', got {activation!r}")
    if activation == "static" and calibration is None:
        raise ValueError("calibration: static activation scales need a calibration callable")
    peaks = _calibrate(model, calibration) if activation == "static" else {}
    for name, linear in quantizable_linears(model):
        if linear.quantized:
            continue
        w = linear.weight.float()
        scale = w.abs().amax(dim=1) / 127
        scale = torch.where(scale == 0, torch.ones_like(scale), scale)
        q = torch.round(w / scale[:, None]).clamp_(-128, 127).to(torch.int8)
        linear.to_w8a8_shell(static=name in peaks)
        linear.weight.copy_(q)
        linear.weight_scale.copy_(scale)
        if linear.input_scale is not None:
            linear.input_scale.fill_(max(peaks[name], 1e-8) / 127)
    if hasattr(model, "post_load"):
        model.post_load()
    return model


def quantization_config(static: bool) -> dict:
    """The config.json `quantization_config` of a checkpoint written by save_w8a8."""
    activations = ({"num_bits": 8, "type": "int", "symmetric": True, "strategy": "tensor", "dynamic": False}
                   if static else {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "token", "dynamic": True})
    return {
        "quant_method": "compressed-tensors",
        "format": "int-quantized",
        "ignore": ["lm_head"],
        "config_groups": {"group_0": {
            "targets": ["Linear"],
            "weights": {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel", "dynamic": False},
            "input_activations": activations,
        }},
    }


def checkpoint_is_w8a8(raw_config: dict) -> bool:
    """Whether config.json declares a compressed-tensors int8 W8A8 checkpoint; raises on any other
    quantization but pack-quantized (W4A16: w4a16_checkpoint.py)."""
    q = raw_config.get("quantization_config")
    if not q or (q.get("quant_method") == "compressed-tensors" and q.get("format") == "pack-quantized"):
        return False
    groups = list(q.get("config_groups", {}).values())
    if q.get("quant_method") != "compressed-tensors" or q.get("format") != "int-quantized" or len(groups) != 1:
        raise ValueError("quantization_config: only compressed-tensors int-quantized W8A8 and pack-quantized W4A16 "
                         f"are supported, got {q.get('quant_method')!r}/{q.get('format')!r}")
    return True


def prepare_w8a8_shells(model: nn.Module, tensor_names: set[str]) -> None:
    """Turn every Linear except lm_head into an int8 shell so a quantized checkpoint loads into
    it; a Linear gets a static input scale when the checkpoint has one for it (or a shard of it)."""
    for name, linear in quantizable_linears(model):
        parent = name.rpartition(".")[0]
        sources = [f"{parent}.{shard}" for shard in linear.shard_names] or [name]
        linear.to_w8a8_shell(static=any(f"{src}.input_scale" in tensor_names for src in sources))


def save_w8a8(model: nn.Module, directory: str | Path, raw_config: dict) -> None:
    """Write config.json (+ quantization_config) and model.safetensors with merged projections
    split back into their HF names. The model must be quantized by quantize_w8a8."""
    if tp_size() > 1:  # a rank holds a shard: saving it would write a wrong-shaped checkpoint
        raise NotImplementedError(f"save_w8a8: a tensor-parallel rank (tensor_parallel_size {tp_size()}) holds only its "
                                  "shard; save from a process outside any tensor-parallel group")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    linears = dict(quantizable_linears(model))
    if not linears or not all(m.kind == "w8a8" for m in linears.values()):
        raise ValueError("model: quantize it with quantize_w8a8 before saving a W8A8 checkpoint")
    static = any(m.input_scale is not None for m in linears.values())
    tensors: dict[str, torch.Tensor] = {}
    for name, param in model.named_parameters():
        prefix, _, kind = name.rpartition(".")
        linear = linears.get(prefix)
        if linear is None or not linear.shard_names:
            offset = getattr(param, "checkpoint_offset", 0.0)  # Gemma norms: store HF's w, not 1 + w
            tensors[name] = _stored(kind, param - offset if offset else param)
            continue
        base = prefix.rpartition(".")[0]
        for shard, (offset, rows) in linear.shard_offsets().items():
            part = param.clone() if kind == "input_scale" else param[offset: offset + rows]  # one per shard
            tensors[f"{base}.{shard}.{kind}"] = _stored(kind, part)
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})
    config = dict(raw_config, quantization_config=quantization_config(static))
    (directory / "config.json").write_text(json.dumps(config, indent=2))


def _stored(kind: str, t: torch.Tensor) -> torch.Tensor:
    t = t.detach().contiguous().cpu()
    return t.reshape(-1, 1) if kind == "weight_scale" else t
