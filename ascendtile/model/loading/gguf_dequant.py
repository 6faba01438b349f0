"""GGUF block dequantization in torch for the 32-element block types the embedded models keep
most of their weights in (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0), bit-equal to `gguf.quants.dequantize`: the
same float32 products and sums (a product's operand order does not change its bits). Every other
type goes to gguf's numpy code.

Why: gguf's numpy code makes several full-size temporaries per tensor; this takes about half its
time on the embedded SmolLM2's file, and a test run loads the embedded models in many processes
(tensor-parallel ranks, vLLM, the CLI).
"""
from __future__ import annotations

import gguf
import numpy as np
import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

_SHIFT4 = torch.tensor([0, 4], dtype=torch.uint8).reshape(1, 2, 1)  # low nibbles, then high
_BITS32 = torch.arange(32, dtype=torch.int32)


def _scale(blocks: torch.Tensor, at: int) -> torch.Tensor:
    """The float16 at byte `at` of every block, as float32 [blocks, 1]."""
    return blocks[:, at:at + 2].contiguous().view(torch.float16).float()


def _nibbles(qs: torch.Tensor) -> torch.Tensor:
    """16 bytes per block as its 32 4-bit values [blocks, 32] (uint8): low nibbles, then high."""
    return ((qs.unsqueeze(1) >> _SHIFT4) & 0x0F).reshape(qs.shape[0], 32)


def _fifth_bits(qh: torch.Tensor) -> torch.Tensor:
    """4 bytes per block (a little-endian uint32) as bit i of value i, shifted to 0x10 [blocks, 32]."""
    high = qh.contiguous().view(torch.int32)  # bit 31 sign-extends under >>, masked below
    return (((high >> _BITS32) & 1) << 4).to(torch.uint8)


def _q4_0(blocks: torch.Tensor) -> torch.Tensor:
    return (_nibbles(blocks[:, 2:]).to(torch.int8) - 8).float().mul_(_scale(blocks, 0))


def _q4_1(blocks: torch.Tensor) -> torch.Tensor:
    return _nibbles(blocks[:, 4:]).float().mul_(_scale(blocks, 0)).add_(_scale(blocks, 2))


def _q5_0(blocks: torch.Tensor) -> torch.Tensor:
    values = _nibbles(blocks[:, 6:]) | _fifth_bits(blocks[:, 2:6])
    return (values.to(torch.int8) - 16).float().mul_(_scale(blocks, 0))


def _q5_1(blocks: torch.Tensor) -> torch.Tensor:
    values = _nibbles(blocks[:, 8:]) | _fifth_bits(blocks[:, 4:8])
    return values.float().mul_(_scale(blocks, 0)).add_(_scale(blocks, 2))


def _q8_0(blocks: torch.Tensor) -> torch.Tensor:
    return blocks[:, 2:].view(torch.int8).float().mul_(_scale(blocks, 0))


_BLOCK_DEQUANTIZERS = {
    GGMLQuantizationType.Q4_0: _q4_0, GGMLQuantizationType.Q4_1: _q4_1, GGMLQuantizationType.Q5_0: _q5_0,
    GGMLQuantizationType.Q5_1: _q5_1, GGMLQuantizationType.Q8_0: _q8_0,
}


def dequantize(data: np.ndarray, qtype: GGMLQuantizationType) -> np.ndarray:
    """float32 [*rows, elements per row] of GGUFReader-layout data (uint8 [*rows, bytes per row]
    for a block type), as `gguf.quants.dequantize(data, qtype)` gives it."""
    dequantize_blocks = _BLOCK_DEQUANTIZERS.get(qtype)
    if dequantize_blocks is None:
        return gguf.quants.dequantize(data, qtype)
    block, block_bytes = GGML_QUANT_SIZES[qtype]
    if data.dtype != np.uint8 or data.shape[-1] % block_bytes:
        raise ValueError(f"{qtype.name} data must be uint8 rows of whole {block_bytes}-byte blocks, "
                         f"got {data.dtype} {data.shape}")
    rows = data.shape[:-1]
    # A copy of the bytes (a fraction of the float32 result's size): the data is usually a view of
    # a read-only mmap, which torch will not wrap without a warning.
    blocks = torch.from_numpy(np.array(data, copy=True)).reshape(-1, block_bytes)
    return dequantize_blocks(blocks).reshape(*rows, data.shape[-1] // block_bytes * block).numpy()
