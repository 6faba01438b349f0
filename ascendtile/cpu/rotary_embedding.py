"""`torch.ops.ascendtile.cpu_rotary_embedding`: rotary_embedding over positions [T] in place, as a C++
kernel (rotary_embedding_source.py) that CPU level 2's general graph calls in place of the `ascend`
op's reference (compilation/decompose.py). The reference rotates with seven whole-tensor torch ops
over fp32 copies (a widening copy, four products, a difference and a sum, a concatenation, the
copy back), each a pass over memory; the kernel rotates each head's row in one pass, bit-equal
to the reference (fp32 products, rounded once to the tensor's dtype).

`cpu_rotary_embedding(positions, query, key, head_size, cos_sin_cache, is_neox, rope_dim_offset=0,
inverse=False)`: rotates dims [rope_dim_offset, rope_dim_offset + rot_dim) of every head of query
and key (or None) in place; cos_sin_cache [rows, rot_dim] = cat(cos, sin), contiguous; is_neox
rotates halves, else interleaved pairs; inverse rotates by -theta. The op's body (its operand
checks, which name the wrong argument, and the call) is C++ as well (dispatch.py).

dtypes: fp32, bf16, fp16 for query and key (alike), any of them for cos_sin_cache; positions int32
or int64, one per token; query / key [T, H, D] or [T, H * D] with their last dim contiguous. A
position outside [0, cos_sin_cache rows) leaves its token unrotated, as in the reference."""
from __future__ import annotations

import ctypes

import torch

from ascendtile.cpu import dispatch
from ascendtile.cpu.build import DTYPES
from ascendtile.cpu.rotary_embedding_source import SOURCE

_ARGTYPES = ([ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p] + [ctypes.c_int64] * 3 + [ctypes.c_void_p]
             + [ctypes.c_int64] * 3 + [ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_int,
                                       ctypes.c_int64, ctypes.c_int, ctypes.c_int64, ctypes.c_int])
_kernels: dict[tuple[torch.dtype], ctypes._CFuncPtr] = {}  # (dtype,) -> entry point, once loaded


def load(cache_dir: str, dtypes: list[torch.dtype]) -> bool:
    """Build (or load from cache_dir) the kernels for query / key of these dtypes (DTYPES) and the
    op's C++ body (dispatch.py); False where they cannot be built here."""
    return dispatch.load_op("cpu_rotary_embedding", SOURCE, cache_dir, _ARGTYPES, [(dtype,) for dtype in dtypes],
                            _kernels)


# `calls`: the kernel launches in this process, what shows a graph runs on it
__getattr__ = dispatch.calls_attribute("cpu_rotary_embedding")


def supports(positions: torch.Tensor, query: torch.Tensor) -> bool:
    """Whether the kernel serves these positions [T] and query [T, H, D] or [T, H * D]."""
    return (query.device.type == "cpu" and query.dtype in DTYPES and positions.dim() == 1
            and query.dim() in (2, 3) and query.stride(-1) == 1)


_LIB = torch.library.Library("ascendtile", "FRAGMENT")  # the namespace's DEF: model/layers/expert_dispatch.py
_LIB.define("cpu_rotary_embedding(Tensor positions, Tensor(a!) query, Tensor(b!)? key, int head_size, "
            "Tensor cos_sin_cache, bool is_neox, int rope_dim_offset=0, bool inverse=False) -> ()")


def _cpu_rotary_embedding_fake(positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor | None, head_size: int,
                               cos_sin_cache: torch.Tensor, is_neox: bool, rope_dim_offset: int = 0,
                               inverse: bool = False) -> None:
    return None


# The C++ body (dispatch.py) registers for CPU once loaded, which the dispatcher picks over this.
_LIB.impl("cpu_rotary_embedding", dispatch.not_loaded("cpu_rotary_embedding"), "CompositeExplicitAutograd")
torch.library.register_fake("ascendtile::cpu_rotary_embedding", _cpu_rotary_embedding_fake, lib=_LIB)


def rotary_embedding_cpu(positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor | None, head_size: int,
                         cos_sin_cache: torch.Tensor, is_neox: bool, rope_dim_offset: int = 0,
                         inverse: bool = False) -> None:
    """rotary_embedding's signature over cpu_rotary_embedding, for a general graph's rope call
    (decompose.py puts it there for positions [T] only)."""
    torch.ops.ascendtile.cpu_rotary_embedding.default(positions, query, key, head_size, cos_sin_cache, is_neox,
                                                      rope_dim_offset, inverse)
