"""compressed-tensors W4A16 checkpoints ("pack-quantized", what vLLM serves as W4A16 / WNA16):
read into W4A16 Linears and written from them.

config.json `quantization_config`: quant_method "compressed-tensors", format "pack-quantized", one
config group whose weights are num_bits 4, type "int", strategy "group" (group_size) or "channel"
(one group per row), symmetric or not, static; no input activations. `ignore` names the Linears
left float (lm_head). Per quantized layer:
  weight_packed      int32 [N, K/8]: value k at bits 4·(k % 8) of word k / 8, stored q + 8 for the
                     signed value q in [−8, 7] (so 0..15, the W4A16 layout's nibbles: read on a
                     little-endian host, the words' bytes are qweight as they are);
  weight_scale       [N, K/G] in the model dtype;
  weight_zero_point  int32 [⌈N/8⌉, K/G] (asymmetric only): zero points z + 8 packed eight rows to a
                     word, row r at bits 4·(r % 8);
  weight_shape       int64 [2] = (N, K).
w = (q − z)·scale for the signed q and z (vLLM's uint4 with zero points: (q' − z')·scale on the
stored values), i.e. scale = weight_scale and min = −z'·scale; symmetric means z = 0, z' = 8
(vLLM's uint4b8). With 16-bit scales (a bf16 / fp16 model's; quantize_w4a16 rounds an fp32
model's to bf16 precision) q·scale and z·scale are exact in fp32, so the loaded weights are
exactly (q − z)·scale; fp32 scales of more than 20 significant bits round there. Either way a
checkpoint written from loaded weights reloads bit-identically.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

import torch
from safetensors.torch import save_file
from torch import nn

from ascendtile.distributed import tp_size
from ascendtile.model.layers.linear import Linear
from ascendtile.model.loading.checkpoint import CheckpointTensor
from ascendtile.model.loading.w8a8 import quantizable_linears

FORMAT = "pack-quantized"
PACK = 8  # 4-bit values per int32
SYMMETRIC_ZERO = 8


@dataclass(frozen=True)
class W4A16Scheme:
    group_size: int | None  # None: "channel", one group per row
    symmetric: bool


def checkpoint_w4a16_scheme(raw_config: dict) -> W4A16Scheme | None:
    """The W4A16 scheme config.json declares, None for a checkpoint that is not pack-quantized; a
    pack-quantized scheme other than 4-bit int weights per group or channel, static, weight-only,
    is a ValueError naming its quantization_config field."""
    q = raw_config.get("quantization_config") or {}
    if q.get("quant_method") != "compressed-tensors" or q.get("format") != FORMAT:
        return None
    groups = list((q.get("config_groups") or {}).values())
    if len(groups) != 1:
        raise ValueError(f"quantization_config.config_groups: one group is supported, got {len(groups)}")
    group = groups[0]
    weights = group.get("weights") or {}
    field = "quantization_config.config_groups.*.weights"
    expected = {"num_bits": 4, "type": "int"}
    for key, value in expected.items():
        if weights.get(key) != value:
            raise ValueError(f"{field}.{key}: must be {value!r} for W4A16, got {weights.get(key)!r}")
    strategy, size = weights.get("strategy"), weights.get("group_size")
    if strategy not in ("group", "channel") or (strategy == "group" and not isinstance(size, int)):
        raise ValueError(f"{field}.strategy: must be 'group' (with a group_size) or 'channel', got {strategy!r} "
                         f"(group_size {size!r})")
    if weights.get("dynamic") or weights.get("actorder") == "group":
        raise ValueError(f"{field}: dynamic weights and group activation order (g_idx) are not supported")
    if group.get("input_activations"):
        raise ValueError("quantization_config.config_groups.*.input_activations: W4A16 quantizes weights only")
    return W4A16Scheme(size if strategy == "group" else None, bool(weights.get("symmetric", True)))


def packed_groups(tensors: Iterable[tuple[str, str, CheckpointTensor]], scheme: W4A16Scheme) -> dict[str, int]:
    """Checkpoint layer name -> group size of every packed weight (from the headers alone), for
    prepare_w4a16_shells."""
    return {name.removesuffix(".weight_packed"): scheme.group_size or tensor.shape[1] * PACK
            for _, name, tensor in tensors if name.endswith(".weight_packed")}


class _Held:
    """A tensor already read (scales, mins), narrowed to a part on request."""

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor, self.shape = tensor, tuple(tensor.shape)

    def read(self, part: tuple[int, int, int] | None) -> torch.Tensor:
        return self.tensor if part is None else self.tensor.narrow(*part)


class _PackedWeight:
    """weight_packed int32 [N, K/8] as qweight uint8 [N, K/2]: the words' bytes (little-endian), a
    part read from the file alone when it is whole words."""

    def __init__(self, file: str, name: str, source: CheckpointTensor) -> None:
        self.file, self.name, self.source = file, name, source
        self.shape = (source.shape[0], source.shape[1] * 4)

    def read(self, part: tuple[int, int, int] | None) -> torch.Tensor:
        if part is not None and part[0] == 1:
            if part[1] % 4 or part[2] % 4:
                return self.read(None).narrow(*part)
            part = (1, part[1] // 4, part[2] // 4)
        words = self.source.read(part)
        if words.dtype != torch.int32:
            raise ValueError(f"{self.file}: tensor {self.name!r} has dtype {words.dtype}, expected torch.int32")
        return words.contiguous().view(torch.uint8)


def _unpack_rows(words: torch.Tensor, rows: int) -> torch.Tensor:
    """int32 [⌈rows/8⌉, G] of 4-bit values packed along rows -> int32 [rows, G]."""
    shifts = torch.arange(PACK, dtype=torch.int32) * 4
    values = (words[:, None, :] >> shifts[None, :, None]) & 15
    return values.reshape(-1, words.shape[1])[:rows]


def w4a16_tensors(tensors: Iterable[tuple[str, str, CheckpointTensor]],
                  scheme: W4A16Scheme) -> Iterator[tuple[str, str, CheckpointTensor]]:
    """A pack-quantized checkpoint's tensors as the W4A16 Linears' parameters: `<layer>.qweight`
    (weight_packed's bytes), `.scales` (weight_scale in fp32), `.mins` (−z·scale, once a layer's
    scale and zero point are both read); weight_shape checked against weight_packed; every other
    tensor as it is. Scales and zero points (1/16 of the weight or less) are read whole."""
    scales: dict[str, torch.Tensor] = {}
    zeros: dict[str, torch.Tensor] = {}
    packed: dict[str, tuple[int, int]] = {}  # (N, K) of weight_packed's header
    declared: dict[str, tuple[str, tuple[int, ...]]] = {}  # weight_shape's (file, value)

    def check_shape(layer: str) -> None:
        if layer in packed and layer in declared:
            where, shape = declared.pop(layer)
            if shape != packed[layer]:
                raise ValueError(f"{where}: tensor '{layer}.weight_shape' is {list(shape)}, its weight_packed "
                                 f"holds {list(packed[layer])}")

    def mins(layer: str) -> Iterator[tuple[str, str, CheckpointTensor]]:
        scale = scales[layer]
        if scheme.symmetric:
            yield file, f"{layer}.mins", _Held(-SYMMETRIC_ZERO * scale)
        elif layer in zeros:
            zero = _unpack_rows(zeros.pop(layer), scale.shape[0])
            if zero.shape != scale.shape:
                raise ValueError(f"{file}: tensor '{layer}.weight_zero_point' unpacks to shape {tuple(zero.shape)}, "
                                 f"its weight_scale has {tuple(scale.shape)}")
            yield file, f"{layer}.mins", _Held(-zero.float() * scale)

    for file, name, tensor in tensors:
        layer, _, param = name.rpartition(".")
        if param == "weight_packed":
            packed[layer] = (tensor.shape[0], tensor.shape[1] * PACK)
            check_shape(layer)
            yield file, f"{layer}.qweight", _PackedWeight(file, name, tensor)
        elif param == "weight_scale":
            scales[layer] = tensor.read(None).float()
            yield file, f"{layer}.scales", _Held(scales[layer])
            yield from mins(layer)
        elif param == "weight_zero_point" and not scheme.symmetric:
            zeros[layer] = tensor.read(None)
            if layer in scales:
                yield from mins(layer)
        elif param == "weight_shape":
            declared[layer] = (file, tuple(int(v) for v in tensor.read(None).tolist()))
            check_shape(layer)
        else:
            yield file, name, tensor


def _pack_rows(values: torch.Tensor) -> torch.Tensor:
    """int32 [rows, G] of 4-bit values -> [⌈rows/8⌉, G], eight rows to a word (the inverse of _unpack_rows)."""
    rows = values.shape[0]
    padded = torch.zeros(-(-rows // PACK) * PACK, values.shape[1], dtype=torch.int32)
    padded[:rows] = values
    shifts = torch.arange(PACK, dtype=torch.int32) * 4
    words = padded.reshape(-1, PACK, values.shape[1]) << shifts[None, :, None]
    return words.sum(dim=1, dtype=torch.int32)  # disjoint bits: the sum is the bitwise or


def _zero_points(layer: str, scales: torch.Tensor, mins: torch.Tensor) -> torch.Tensor:
    """The stored zero points z' (mins = −z'·scale) as int32, or a ValueError naming the layer
    whose mins are not an integer 0..15 times its scale (GGUF Q4_1 / Q4_K weights)."""
    zero = torch.round(-mins / scales)
    if not torch.equal(-zero * scales, mins) or zero.min() < 0 or zero.max() > 15:
        raise ValueError(f"model: {layer}'s mins are not −z·scale with an integer zero point z in 0..15, which "
                         "compressed-tensors stores (GGUF Q4_1 and Q4_K weights have free mins)")
    return zero.to(torch.int32)


def quantization_config(group_size: int | None, symmetric: bool, ignore: list[str]) -> dict:
    """The config.json `quantization_config` of a checkpoint written by save_w4a16 (group_size None: "channel")."""
    weights = {"num_bits": 4, "type": "int", "symmetric": symmetric, "strategy": "channel" if group_size is None else "group",
               "group_size": group_size, "dynamic": False, "actorder": None, "observer": "minmax"}
    return {
        "quant_method": "compressed-tensors",
        "format": FORMAT,
        "quantization_status": "compressed",
        "ignore": ignore,
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights, "input_activations": None,
                                      "output_activations": None, "format": FORMAT}},
    }


def _checkpoint_group(quantized: dict[str, Linear]) -> int | None:
    """The one group size of every W4A16 Linear, or None when each one's group is its whole row."""
    sizes = {m.group_size for m in quantized.values()}
    if len(sizes) == 1:
        return sizes.pop()
    if all(m.group_size == m.in_features for m in quantized.values()):
        return None
    raise ValueError(f"model: its W4A16 Linears have several group sizes {sorted(sizes)}; a checkpoint has one")


def _projections(prefix: str, linear: Linear) -> list[tuple[str, slice]]:
    """(checkpoint layer name, its rows) of each projection a Linear merges, or of the Linear itself."""
    if not linear.shard_names:
        return [(prefix, slice(None))]
    parent = prefix.rpartition(".")[0]
    return [(f"{parent}.{shard}", slice(start, start + rows)) for shard, (start, rows) in linear.shard_offsets().items()]


def _packed_tensors(layer: str, linear: Linear, rows: slice, zero: torch.Tensor,
                    symmetric: bool) -> dict[str, torch.Tensor]:
    """One projection's weight_packed, weight_scale (the model dtype), weight_shape and, asymmetric, weight_zero_point."""
    if linear.in_features % PACK:
        raise ValueError(f"model: {layer} has {linear.in_features} inputs, not a multiple of {PACK} (an int32 word)")
    scale = linear.scales[rows].detach().cpu()
    stored = scale.to(linear.activation_dtype)
    if not torch.equal(stored.float(), scale):
        raise ValueError(f"model: {layer}'s scales are not exact in {linear.activation_dtype}, the model dtype the "
                         "checkpoint stores them in (load or quantize the model in float32)")
    qweight = linear.qweight[rows].detach().cpu()
    tensors = {f"{layer}.weight_packed": qweight.contiguous().view(torch.int32).clone(),
               f"{layer}.weight_scale": stored.contiguous(),
               f"{layer}.weight_shape": torch.tensor([qweight.shape[0], linear.in_features], dtype=torch.int64)}
    if not symmetric:
        tensors[f"{layer}.weight_zero_point"] = _pack_rows(zero[rows].cpu())
    return tensors


def save_w4a16(model: nn.Module, directory: str | Path, raw_config: dict) -> None:
    """Write config.json (+ quantization_config) and model.safetensors of a model whose Linears
    but lm_head are W4A16 (loaded as such or converted by quantize_w4a16), in the layout above:
    merged projections split back into their HF names, a Linear left float under its `weight` and
    named in `ignore` with lm_head, scales in the model dtype (exact in it), "symmetric" when every
    zero point is 8, one group size for every layer ("channel" when each group is a whole row).
    A model that cannot be written so is a ValueError naming `model`."""
    if tp_size() > 1:  # a rank holds a shard: saving it would write a wrong-shaped checkpoint
        raise NotImplementedError(f"save_w4a16: a tensor-parallel rank (tensor_parallel_size {tp_size()}) holds only "
                                  "its shard; save from a process outside any tensor-parallel group")
    linears = dict(quantizable_linears(model))
    quantized = {name: m for name, m in linears.items() if m.kind == "w4a16"}
    if not quantized:
        raise ValueError("model: no W4A16 Linear to save (quantize it with quantize_w4a16)")
    group_size = _checkpoint_group(quantized)
    zeros = {name: _zero_points(name, m.scales.detach(), m.mins.detach()) for name, m in quantized.items()}
    symmetric = all(bool((z == SYMMETRIC_ZERO).all()) for z in zeros.values())
    ignore = [] if getattr(model, "lm_head", None) is None else ["lm_head"]
    tensors: dict[str, torch.Tensor] = {}
    for name, param in model.named_parameters():
        prefix, _, kind = name.rpartition(".")
        linear = linears.get(prefix)
        if linear is None:
            offset = getattr(param, "checkpoint_offset", 0.0)  # Gemma norms: store HF's w, not 1 + w
            tensors[name] = (param - offset if offset else param).detach().contiguous().cpu()
            continue
        for layer, rows in _projections(prefix, linear):
            if kind == "qweight":
                tensors.update(_packed_tensors(layer, linear, rows, zeros[prefix], symmetric))
            elif kind in ("weight", "bias"):  # scales and mins go with qweight
                tensors[f"{layer}.{kind}"] = param[rows].detach().contiguous().cpu()
                if kind == "weight":
                    ignore.append(layer)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})
    config = dict(raw_config, quantization_config=quantization_config(group_size, symmetric, ignore))
    (directory / "config.json").write_text(json.dumps(config, indent=2))
