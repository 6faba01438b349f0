"""A fast GGUF header reader: metadata dict and tensor table, tensor data as views of one
read-only mmap (nothing is copied until a tensor is dequantized).

gguf.GGUFReader builds numpy views for every element of every metadata array, which takes ~20 s
on Gemma 3's 262k-token vocabulary (~4 s on SmolLM2's); here numeric arrays are one frombuffer
and strings one struct read each (~0.3 s). Values come back as gguf's `field.contents()` gives
them (str, int, float, bool, lists); tensor data has GGUFReader's layout (element arrays for
float/int types, uint8 rows for block-quantized ones), which `gguf.quants.dequantize` and
gguf_dequant.py take; `GGUFTensor.dequantize` can dequantize a part of a tensor (a
tensor-parallel rank's rows or columns) from the bytes of that part alone. Little-endian GGUF v2/v3 only.
"""
from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType

from ascendtile.model.loading.gguf_dequant import dequantize

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
_SCALAR_FORMATS = {
    GGUFValueType.UINT8: "<B", GGUFValueType.INT8: "<b", GGUFValueType.UINT16: "<H", GGUFValueType.INT16: "<h",
    GGUFValueType.UINT32: "<I", GGUFValueType.INT32: "<i", GGUFValueType.FLOAT32: "<f", GGUFValueType.BOOL: "<?",
    GGUFValueType.UINT64: "<Q", GGUFValueType.INT64: "<q", GGUFValueType.FLOAT64: "<d",
}
# Tensor types stored as plain elements; every other type is block-quantized bytes.
_ELEMENT_DTYPES = {
    GGMLQuantizationType.F32: np.float32, GGMLQuantizationType.F16: np.float16, GGMLQuantizationType.F64: np.float64,
    GGMLQuantizationType.I8: np.int8, GGMLQuantizationType.I16: np.int16, GGMLQuantizationType.I32: np.int32,
    GGMLQuantizationType.I64: np.int64,
}


@dataclass
class GGUFTensor:
    name: str
    tensor_type: GGMLQuantizationType
    shape: tuple[int, ...]  # numpy order (slowest dim first), i.e. GGUF's dims reversed
    data: np.ndarray  # elements [*shape], or uint8 [*shape[:-1], bytes per row] when quantized

    def dequantize(self, part: tuple[int, int, int] | None = None) -> np.ndarray:
        """The tensor as float32 [*shape] (part None), or `length` entries from `start` along `dim`
        (part = (dim, start, length)), dequantizing only what the part needs: whole rows (any dim
        but the last, and every dim of an element type) slice the stored data first; a column
        range of block-quantized rows slices bytes when it is block-aligned, and otherwise
        dequantizes the rows and then narrows."""
        data = self.data
        if part is not None:
            dim, start, length = part
            block, block_bytes = GGML_QUANT_SIZES[self.tensor_type]
            if self.tensor_type in _ELEMENT_DTYPES or dim < len(self.shape) - 1:
                data = data[(slice(None),) * dim + (slice(start, start + length),)]
            elif start % block == 0 and length % block == 0:
                data = data[..., start // block * block_bytes: (start + length) // block * block_bytes]
            else:
                return dequantize(data, self.tensor_type)[..., start: start + length]
        return dequantize(np.ascontiguousarray(data), self.tensor_type)


class _Cursor:
    def __init__(self, buffer: mmap.mmap) -> None:
        self.buffer, self.pos = buffer, 0

    def scalar(self, fmt: str) -> Any:
        (value,) = struct.unpack_from(fmt, self.buffer, self.pos)
        self.pos += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        length = self.scalar("<Q")
        end = self.pos + length
        if end > len(self.buffer):
            raise ValueError(f"string of {length} bytes runs past the end of the file")
        text = self.buffer[self.pos: end].decode("utf-8", errors="replace")
        self.pos = end
        return text

    def value(self, kind: int) -> Any:
        kind = GGUFValueType(kind)
        if kind == GGUFValueType.STRING:
            return self.string()
        if kind == GGUFValueType.ARRAY:
            item_kind, count = GGUFValueType(self.scalar("<I")), self.scalar("<Q")
            if item_kind in _SCALAR_FORMATS:
                dtype = np.dtype(_SCALAR_FORMATS[item_kind])
                items = np.frombuffer(self.buffer, dtype, count, self.pos)
                self.pos += count * dtype.itemsize
                return items.tolist()
            return [self.value(item_kind) for _ in range(count)]
        return self.scalar(_SCALAR_FORMATS[kind])


def read_gguf(path: str) -> tuple[dict[str, Any], list[GGUFTensor]]:
    """(metadata, tensors) of a GGUF file. Raises ValueError on a bad magic, an unsupported
    version, or a header or tensor that runs past the end of the file."""
    with open(path, "rb") as f:
        buffer = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    cursor = _Cursor(buffer)
    magic = buffer[:4]
    if magic != MAGIC:
        raise ValueError(f"bad magic {magic!r} (expected {MAGIC!r})")
    version = cursor.scalar("<4xI")
    if version not in (2, 3):
        raise ValueError(f"GGUF version {version} is not supported (2 or 3, little-endian)")
    tensor_count, kv_count = cursor.scalar("<Q"), cursor.scalar("<Q")
    metadata = {}
    for _ in range(kv_count):
        key = cursor.string()
        metadata[key] = cursor.value(cursor.scalar("<I"))
    infos = []
    for _ in range(tensor_count):
        name = cursor.string()
        dims = [cursor.scalar("<Q") for _ in range(cursor.scalar("<I"))]
        infos.append((name, GGMLQuantizationType(cursor.scalar("<I")), dims, cursor.scalar("<Q")))
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    data_start = -(-cursor.pos // alignment) * alignment
    return metadata, [_tensor(buffer, data_start, *info) for info in infos]


def _tensor(buffer: mmap.mmap, data_start: int, name: str, kind: GGMLQuantizationType, dims: list[int],
            offset: int) -> GGUFTensor:
    shape = tuple(reversed(dims))
    block, block_bytes = GGML_QUANT_SIZES[kind]
    if shape and shape[-1] % block:
        raise ValueError(f"tensor {name!r}: row of {shape[-1]} elements is not a whole number of {kind.name} blocks")
    elements = int(np.prod(shape))
    start, size = data_start + offset, elements // block * block_bytes
    if start + size > len(buffer):
        raise ValueError(f"tensor {name!r} data ends at byte {start + size}, past the end of the file ({len(buffer)})")
    if kind in _ELEMENT_DTYPES:
        data = np.frombuffer(buffer, _ELEMENT_DTYPES[kind], elements, start).reshape(shape)
    else:
        data = np.frombuffer(buffer, np.uint8, size, start).reshape(*shape[:-1], shape[-1] // block * block_bytes)
    return GGUFTensor(name, kind, shape, data)
