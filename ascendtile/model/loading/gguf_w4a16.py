"""GGUF 4-bit tensors (Q4_0, Q4_1, Q4_K) decoded from the file's bytes into the W4A16 layout
(ops/reference/w4a16.py): qweight uint8 [N, K/2], scales and mins fp32 [N, K/32], with no float
copy of the weight.

All three are "uint4 with a scale and a min per group of 32":
  Q4_0 block (32 values, 18 bytes): fp16 d, 16 bytes of nibbles; w = d·(q − 8): scale d, min −8d.
  Q4_1 block (32 values, 20 bytes): fp16 d, fp16 m, 16 bytes of nibbles; w = d·q + m.
  Q4_K super-block (256 values, 144 bytes): fp16 d, fp16 dmin, 12 bytes of eight 6-bit scales and
       eight 6-bit mins, 128 bytes of nibbles; sub-block s: w = (d·sc_s)·q − dmin·m_s.
Each scale and min is an exact fp32 product (an fp16 times a small integer) and q·scale is exact
too, so dequantize_w4a16 of the result rounds once where gguf's dequantizer rounds once: the same
fp32 weights (±0 aside: Q4_0's zero is +0 here where gguf may give −0).

Nibble order differs: a GGUF block of 32 holds value i in the low nibble of byte i and value
16 + i in the high nibble (Q4_K: per 32 bytes, sub-block 2c low, 2c + 1 high), where the W4A16
layout pairs neighbours (2j low, 2j + 1 high), so the nibbles are re-paired here.
"""
from __future__ import annotations

from typing import Protocol

import numpy as np
import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from ascendtile.model.loading.gguf_reader import GGUFTensor

GROUP_SIZE = 32
INT4_TYPES = (GGMLQuantizationType.Q4_0, GGMLQuantizationType.Q4_1, GGMLQuantizationType.Q4_K)

Int4Arrays = tuple[np.ndarray, np.ndarray, np.ndarray]


def _pair_nibbles(values: np.ndarray) -> np.ndarray:
    """uint8 [..., 2m] values 0..15 -> [..., m] bytes: 2j low nibble, 2j + 1 high."""
    return values[..., 0::2] | (values[..., 1::2] << np.uint8(4))


def _fp16(blocks: np.ndarray, start: int) -> np.ndarray:
    """The fp16 at byte `start` of every block, as fp32 [..., 1]."""
    return np.ascontiguousarray(blocks[..., start: start + 2]).view(np.float16).astype(np.float32)


def _k_scale_min(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K's 12 bytes -> eight 6-bit scales and eight 6-bit mins (llama.cpp's get_scale_min_k4):
    sub-blocks 0-3 hold theirs in the low 6 bits of bytes 0-3 (scale) and 4-7 (min); sub-blocks
    4-7 in the nibbles of bytes 8-11 (scale low, min high), their top 2 bits in the top 2 bits of
    bytes 0-3 (scale) and 4-7 (min)."""
    low, high, rest = packed[..., 0:4], packed[..., 4:8], packed[..., 8:12]
    scales = np.concatenate([low & 63, (rest & 15) | ((low >> 6) << 4)], axis=-1)
    mins = np.concatenate([high & 63, (rest >> 4) | ((high >> 6) << 4)], axis=-1)
    return scales.astype(np.float32), mins.astype(np.float32)


def decode_int4(data: np.ndarray, kind: GGMLQuantizationType) -> Int4Arrays:
    """Rows of 4-bit blocks, uint8 [R, blocks·block_bytes], -> (qweight uint8 [R, K/2], scales fp32
    [R, K/32], mins fp32 [R, K/32]) with K the rows' element count."""
    if kind not in INT4_TYPES:
        raise ValueError(f"kind: {kind.name} is not a 4-bit GGUF type ({', '.join(t.name for t in INT4_TYPES)})")
    block_bytes = GGML_QUANT_SIZES[kind][1]
    rows = data.shape[0]
    blocks = data.reshape(rows, -1, block_bytes)
    if kind == GGMLQuantizationType.Q4_K:
        d, dmin = _fp16(blocks, 0), _fp16(blocks, 2)
        sc, m = _k_scale_min(blocks[..., 4:16])
        scales, mins = d * sc, -(dmin * m)
        nibbles = blocks[..., 16:].reshape(rows, -1, 4, 1, 32)  # 4 chunks of 32 bytes per super-block
    else:
        d = _fp16(blocks, 0)
        scales = d
        mins = _fp16(blocks, 2) if kind == GGMLQuantizationType.Q4_1 else d * np.float32(-8)
        nibbles = blocks[..., -16:].reshape(rows, -1, 1, 1, 16)
    # [..., 2, n]: low nibbles are the first n values (of a block or sub-block), high the next n
    values = np.concatenate([nibbles & np.uint8(15), nibbles >> np.uint8(4)], axis=-2)
    qweight = _pair_nibbles(values.reshape(rows, -1))
    return qweight, scales.reshape(rows, -1), mins.reshape(rows, -1)


def read_int4(tensor: GGUFTensor, part: tuple[int, int, int] | None = None) -> Int4Arrays:
    """decode_int4 of a 2-D 4-bit tensor [N, K], or of `length` rows (dim 0) or columns (dim 1,
    whole groups of 32) from `start` (part = (dim, start, length)), decoding only the blocks the
    part covers."""
    if len(tensor.shape) != 2:
        raise ValueError(f"tensor {tensor.name!r}: a 4-bit linear weight must be 2-D, got shape {tensor.shape}")
    data = tensor.data
    if part is None:
        return decode_int4(data, tensor.tensor_type)
    dim, start, length = part
    if dim == 0:
        return decode_int4(data[start: start + length], tensor.tensor_type)
    if start % GROUP_SIZE or length % GROUP_SIZE:
        raise ValueError(f"tensor {tensor.name!r}: columns [{start}, {start + length}) split a group of {GROUP_SIZE}")
    block, block_bytes = GGML_QUANT_SIZES[tensor.tensor_type]
    first, end = start // block, -(-(start + length) // block)
    qweight, scales, mins = decode_int4(data[:, first * block_bytes: end * block_bytes], tensor.tensor_type)
    offset = start - first * block
    groups = slice(offset // GROUP_SIZE, (offset + length) // GROUP_SIZE)
    return qweight[:, offset // 2: (offset + length) // 2], scales[:, groups], mins[:, groups]


class Int4Source(Protocol):
    """A 4-bit checkpoint tensor [N, K] (gguf_loader.GGUFCheckpointTensor)."""
    shape: tuple[int, ...]

    def read_int4(self, part: tuple[int, int, int] | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(qweight, scales, mins) of the whole tensor or of a part in elements (dim, start, length)."""


class _Decoded:
    """One source decoded once per part: the weight loader reads a tensor's three parameters one
    after another with the same part, so the last decode is kept for the next two."""

    def __init__(self, source: Int4Source) -> None:
        self.source, self.part, self.arrays = source, None, None

    def get(self, part: tuple[int, int, int] | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if self.arrays is None or part != self.part:
            self.part, self.arrays = part, self.source.read_int4(part)
        return self.arrays


class Int4Parameter:
    """One W4A16 parameter (qweight, scales or mins) of a 4-bit tensor, as a checkpoint.CheckpointTensor:
    shape and parts in the parameter's own units (bytes of two values, groups of 32)."""

    def __init__(self, decoded: _Decoded, index: int, per_column: int) -> None:
        self.decoded, self.index, self.per_column = decoded, index, per_column
        rows, columns = decoded.source.shape
        self.shape = (rows, columns // per_column)

    def read(self, part: tuple[int, int, int] | None) -> torch.Tensor:
        if part is not None and part[0] == 1:
            part = (1, part[1] * self.per_column, part[2] * self.per_column)
        return self.decoded.get(part)[self.index]


def int4_parameters(source: Int4Source) -> dict[str, Int4Parameter]:
    """Parameter name ("qweight", "scales", "mins") -> that parameter of `source`, decoded once between them."""
    decoded = _Decoded(source)
    return {name: Int4Parameter(decoded, i, per_column)
            for i, (name, per_column) in enumerate((("qweight", 2), ("scales", GROUP_SIZE), ("mins", GROUP_SIZE)))}
