"""W4A16: group-wise 4-bit weights (ops/reference/w4a16.py's layout) for every Linear except the LM
head, activations in the model dtype. Three sources:
- GGUF Q4_0 / Q4_1 / Q4_K tensors, kept as they are (gguf_w4a16.py);
- compressed-tensors pack-quantized checkpoints, vLLM's W4A16 (w4a16_checkpoint.py);
- float weights, round-to-nearest per group here (quantize_w4a16).
A loader first turns the Linears it will fill into W4A16 shells (prepare_w4a16_shells). A merged
Linear (q/k/v, gate/up) becomes W4A16 only when every one of its checkpoint projections is 4-bit
with the same group size; otherwise it stays float (a GGUF's other types dequantized as usual).
Under tensor parallelism the shells shard like float weights (parallel_linear.py); a row-parallel
rank's columns must be whole groups.
"""
from __future__ import annotations

from typing import Mapping

import torch
from torch import nn

from ascendtile.model.layers.linear import Linear
from ascendtile.model.loading.w8a8 import quantizable_linears
from ascendtile.ops.reference.w4a16 import pack_nibbles
from ascendtile.ops.w4a16 import check_group_size

# quantize_w4a16's group sizes for load_model(quantization="w4a16") on a float checkpoint, in
# order of preference: vLLM's usual 128 where it divides every Linear's inputs, else the largest
# that does (SmolLM2's hidden size 576 takes 64).
DEFAULT_GROUP_SIZES = (128, 64, 32)


def _sources(name: str, linear: Linear) -> list[str]:
    """The checkpoint names of a Linear's projections (its shards', when merged)."""
    parent = name.rpartition(".")[0]
    return [f"{parent}.{shard}" if parent else shard for shard in linear.shard_names] or [name]


def prepare_w4a16_shells(model: nn.Module, groups: Mapping[str, int], dtype: torch.dtype) -> set[str]:
    """Turn into W4A16 shells the Linears except lm_head whose checkpoint projections all have a
    group size in `groups` (checkpoint layer name -> group size), the same for each; return the
    names of the projections made W4A16 (the others load as float)."""
    converted = set()
    for name, linear in quantizable_linears(model):
        sources = _sources(name, linear)
        sizes = {groups.get(source) for source in sources}
        if len(sizes) == 1 and None not in sizes:
            linear.to_w4a16_shell(sizes.pop(), dtype)
            converted.update(sources)
    return converted


def default_group_size(model: nn.Module) -> int:
    """The first of DEFAULT_GROUP_SIZES dividing the inputs of every float Linear quantize_w4a16 would convert."""
    widths = {linear.in_features for _, linear in quantizable_linears(model) if not linear.quantized}
    for size in DEFAULT_GROUP_SIZES:
        if all(width % size == 0 for width in widths):
            return size
    raise ValueError(f"group_size: none of {DEFAULT_GROUP_SIZES} divides every Linear's input width {sorted(widths)}")


def quantize_weight(weight: torch.Tensor, group_size: int, symmetric: bool,
                    scale_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Round-to-nearest 4-bit quantization of weight [N, K] per group of group_size inputs ->
    (qweight uint8 [N, K/2], scales fp32, mins fp32 [N, K/group_size]), compressed-tensors' rule:
    symmetric: scale = max|w| / 7.5, zero point 8; asymmetric: the group's range widened to hold 0,
    scale = range / 15, zero point z = round(−low / scale). Each scale is rounded to `scale_dtype`
    (a 16-bit dtype) before q = clamp(round(w / scale) + z, 0, 15): then q·scale and min = −z·scale
    are exact in fp32, so the dequantized weight is exactly (q − z)·scale, what compressed-tensors
    and vLLM compute. An all-zero group gets scale 1."""
    if scale_dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(f"scale_dtype: must be torch.float16 or torch.bfloat16, got {scale_dtype}")
    n, k = weight.shape
    w = weight.detach().float().reshape(n, k // group_size, group_size)
    if symmetric:
        scale = w.abs().amax(dim=-1) / 7.5
    else:
        low, high = w.amin(dim=-1).clamp(max=0), w.amax(dim=-1).clamp(min=0)
        scale = (high - low) / 15
    scale = scale.to(scale_dtype).float()
    scale = torch.where(scale == 0, torch.ones_like(scale), scale)
    zero = torch.full_like(scale, 8.0) if symmetric else torch.round(-low / scale).clamp(0, 15)
    q = (torch.round(w / scale[..., None]) + zero[..., None]).clamp_(0, 15).to(torch.uint8)
    return pack_nibbles(q.reshape(n, k)), scale, -zero * scale


@torch.no_grad()
def quantize_w4a16(module: nn.Module, group_size: int = 128, symmetric: bool = False) -> nn.Module:
    """Convert to W4A16 in place, round-to-nearest per group (quantize_weight), and return `module`:
    a Linear itself, or every float Linear of a model except lm_head (embeddings stay float too).
    Scales are rounded to each Linear's weight dtype (the model's) when it is 16-bit, else to
    bfloat16's precision (kept in fp32): so a written checkpoint, its scales in the model dtype,
    holds them exactly, and every q·scale and z·scale is exact in fp32. A group_size that does not
    divide a Linear's inputs (or, under tensor parallelism, splits a group across ranks) is a
    ValueError naming group_size and the Linear, raised before any Linear changes."""
    if not isinstance(symmetric, bool):
        raise TypeError(f"symmetric: must be a bool, got {symmetric!r}")
    linears = [("", module)] if isinstance(module, Linear) else quantizable_linears(module)
    linears = [(name, linear) for name, linear in linears if not linear.quantized]
    for name, linear in linears:
        check_group_size(group_size, linear.in_features, name or "the Linear")
    for _, linear in linears:
        weight = linear.weight
        scale_dtype = weight.dtype if weight.dtype in (torch.float16, torch.bfloat16) else torch.bfloat16
        qweight, scales, mins = quantize_weight(weight, group_size, symmetric, scale_dtype)
        linear.to_w4a16_shell(group_size, weight.dtype)
        linear.qweight.copy_(qweight)
        linear.scales.copy_(scales)
        linear.mins.copy_(mins)
    if isinstance(module, Linear):
        module.prepack()
    elif hasattr(module, "post_load"):
        module.post_load()
    return module
