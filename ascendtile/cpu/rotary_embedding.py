"""`torch.ops.ascendtile.cpu_rotary_embedding`: rotary_embedding over positions [T] in place, as a C++
kernel (rotary_embedding_source.py) that CPU level 2's general graph calls in place of the `ascend`
op's reference (compilation/decompose.py). The reference rotates with seven whole-tensor torch ops
over fp32 copies (a widening copy, four products, a difference and a sum, a concatenation, the
copy back), each a pass over memory; the kernel rotates each head's row in one pass, bit-equal
to the reference (fp32 products, rounded once to the tensor's dtype).

dtypes: fp32, bf16, fp16 for query and key (alike), any of them for cos_sin_cache; positions int32
or int64, one per token; query / key [T, H, D] or [T, H * D] with their last dim contiguous. A
position outside [0, cos_sin_cache rows) leaves its token unrotated, as in the reference."""
from __future__ import annotations

import ctypes

import torch

from ascendtile.cpu.build import DTYPES, load_variants
from ascendtile.cpu.rotary_embedding_source import SOURCE

_CACHE_CODES = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}
_ARGTYPES = ([ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p] + [ctypes.c_int64] * 3 + [ctypes.c_void_p]
             + [ctypes.c_int64] * 3 + [ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_int,
                                       ctypes.c_int64, ctypes.c_int, ctypes.c_int64, ctypes.c_int])
_kernels: dict[tuple[torch.dtype], ctypes._CFuncPtr] = {}  # (dtype,) -> entry point, once loaded

calls = 0  # kernel launches in this process: what shows a general graph runs on it


def load(cache_dir: str, dtypes: list[torch.dtype]) -> bool:
    """Build (or load from cache_dir) the kernels for query / key of these dtypes (DTYPES); False
    where they cannot be built here."""
    return load_variants("rotary_embedding", SOURCE, cache_dir, _ARGTYPES, [(dtype,) for dtype in dtypes], _kernels)


def supports(positions: torch.Tensor, query: torch.Tensor) -> bool:
    """Whether the kernel serves these positions [T] and query [T, H, D] or [T, H * D]."""
    return (query.device.type == "cpu" and query.dtype in DTYPES and positions.dim() == 1
            and query.dim() in (2, 3) and query.stride(-1) == 1)


_LIB = torch.library.Library("ascendtile", "FRAGMENT")  # the namespace's DEF: model/layers/expert_dispatch.py
_LIB.define("cpu_rotary_embedding(Tensor positions, Tensor(a!) query, Tensor(b!)? key, int head_size, "
            "Tensor cos_sin_cache, bool is_neox, int rope_dim_offset=0, bool inverse=False) -> ()")


def _heads(name: str, x: torch.Tensor, head_size: int, tokens: int) -> torch.Tensor:
    """x as [T, H, head_size], checked."""
    heads = x.unflatten(-1, (-1, head_size)) if x.dim() == 2 and x.shape[-1] % head_size == 0 else x
    if heads.dim() != 3 or heads.shape[0] != tokens or heads.shape[2] != head_size or heads.stride(-1) != 1:
        raise ValueError(f"{name}: expected [{tokens}, H, {head_size}] or [{tokens}, H * {head_size}] with its last "
                         f"dim contiguous, got {tuple(x.shape)} (strides {x.stride()})")
    return heads


def cpu_rotary_embedding(positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor | None, head_size: int,
                         cos_sin_cache: torch.Tensor, is_neox: bool, rope_dim_offset: int = 0,
                         inverse: bool = False) -> None:
    """Rotate dims [rope_dim_offset, rope_dim_offset + rot_dim) of every head of query and key
    (or None) in place at positions [T] (int32 / int64): query / key [T, H, D] or [T, H * D],
    fp32 / bf16 / fp16 alike; cos_sin_cache [rows, rot_dim] = cat(cos, sin), contiguous; is_neox
    rotates halves, else interleaved pairs; inverse rotates by -theta."""
    global calls
    if positions.dtype not in (torch.int32, torch.int64) or positions.dim() != 1 or not positions.is_contiguous():
        raise ValueError(f"positions: contiguous int32 / int64 [T], got {positions.dtype} {tuple(positions.shape)}")
    tokens = positions.shape[0]
    q = _heads("query", query, head_size, tokens)
    k = None if key is None else _heads("key", key, head_size, tokens)
    if query.dtype not in DTYPES or (k is not None and k.dtype != query.dtype):
        raise ValueError(f"query / key: fp32, bf16 or fp16 alike, got {query.dtype} and {None if k is None else k.dtype}")
    kernel = _kernels.get((query.dtype,))
    if kernel is None:
        raise RuntimeError(f"cpu_rotary_embedding: the kernel is not loaded for {query.dtype} "
                           f"(ascendtile.cpu.rotary_embedding.load)")
    rot_dim = cos_sin_cache.shape[-1]
    if (cos_sin_cache.dtype not in _CACHE_CODES or cos_sin_cache.dim() != 2 or not cos_sin_cache.is_contiguous()
            or rot_dim % 2 or not 0 < rot_dim <= head_size - rope_dim_offset or rope_dim_offset < 0):
        raise ValueError(f"cos_sin_cache: contiguous [rows, rot_dim] (rot_dim even, rope_dim_offset + rot_dim <= "
                         f"head_size {head_size}), got {cos_sin_cache.dtype} {tuple(cos_sin_cache.shape)} "
                         f"with rope_dim_offset {rope_dim_offset}")
    kernel(
        positions.data_ptr(), positions.dtype == torch.int32, q.data_ptr(), q.stride(0), q.stride(1), q.shape[1],
        None if k is None else k.data_ptr(), 0 if k is None else k.stride(0), 0 if k is None else k.stride(1),
        0 if k is None else k.shape[1], cos_sin_cache.data_ptr(), _CACHE_CODES[cos_sin_cache.dtype],
        cos_sin_cache.shape[0], rot_dim, is_neox, rope_dim_offset, inverse, tokens, torch.get_num_threads())
    calls += 1


def _cpu_rotary_embedding_fake(positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor | None, head_size: int,
                               cos_sin_cache: torch.Tensor, is_neox: bool, rope_dim_offset: int = 0,
                               inverse: bool = False) -> None:
    return None


_LIB.impl("cpu_rotary_embedding", cpu_rotary_embedding, "CPU")
torch.library.register_fake("ascendtile::cpu_rotary_embedding", _cpu_rotary_embedding_fake, lib=_LIB)


def rotary_embedding_cpu(positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor | None, head_size: int,
                         cos_sin_cache: torch.Tensor, is_neox: bool, rope_dim_offset: int = 0,
                         inverse: bool = False) -> None:
    """rotary_embedding's signature over cpu_rotary_embedding, for a general graph's rope call
    (decompose.py puts it there for positions [T] only)."""
    torch.ops.ascendtile.cpu_rotary_embedding.default(positions, query, key, head_size, cos_sin_cache, is_neox,
                                                      rope_dim_offset, inverse)
