"""The int8 KV cache contract, shared by the cache writers (kv_cache) and the attention ops that
read the cache (attention_unified, attention_paged, mla): the kv_cache_dtype names and the scale
layouts, and their checks.

kv_cache_dtype "auto": the cache holds the model dtype (vLLM's default). "int8": the cache holds
symmetric int8 values (round half to even, clamped to [-127, 127]) in the float cache's shape,
dequantized as value · scale, with the scales in one of two forms:
- dynamic, per (token, KV head): fp32 scale caches written beside the cache as each token is
  written, scale = max|row| / 127 over the head's row. Layout [num_blocks, num_kv_heads,
  block_size] (MLA: [num_blocks, 2, block_size], the latent part then the rope part), contiguous:
  the scales of one block and head are one contiguous row, read with the block's K/V tile. An
  all-zero row gets scale 0 and values 0 (dequantized exactly to 0). A row holding NaN or ±inf
  gets scale NaN and values 0: it dequantizes to NaN, so the attention outputs that read it are
  what they are over the float cache holding that row (not finite on the kernel path).
- static, per KV head: fp32 k_scale / v_scale of one element or [num_kv_heads] (MLA: one
  element), given by the caller; values x / scale rounded and saturated to ±127 (NaN stored as 0:
  int8 has no NaN). The scales must be > 0 (not checked: reading them would sync the device).
"""
from __future__ import annotations

import torch

from ascendtile.ops._validate import FLOAT_DTYPES, INT8, check_shape, check_tensor

KV_CACHE_DTYPES = ("auto", "int8")
# Scale-cache parts of an MLA latent row: the kv_lora_rank latent and the rope part.
MLA_SCALE_PARTS = 2


def check_kv_cache_dtype(kv_cache_dtype: str) -> bool:
    """ValueError naming kv_cache_dtype unless it is "auto" or "int8"; returns whether int8."""
    if kv_cache_dtype not in KV_CACHE_DTYPES:
        raise ValueError(f"kv_cache_dtype: {kv_cache_dtype!r} not supported; one of {list(KV_CACHE_DTYPES)} "
                         "('auto' = the cache in the model dtype; fp8 caches are not supported)")
    return kv_cache_dtype == "int8"


def check_cache_dtype(name: str, cache: torch.Tensor, int8: bool, ndim: int) -> None:
    """An int8 cache for kv_cache_dtype "int8", a float one for "auto" (TypeError naming the cache)."""
    if int8 and cache.dtype != torch.int8:
        raise TypeError(f"{name}: kv_cache_dtype 'int8' needs an int8 cache, got {str(cache.dtype).replace('torch.', '')}")
    check_tensor(name, cache, dtypes=INT8 if int8 else FLOAT_DTYPES, ndim=ndim)


def check_static_scale(name: str, scale: torch.Tensor, per_head: int | None) -> None:
    """fp32, one element or (per_head given) one per KV head [per_head]."""
    check_tensor(name, scale, dtypes=(torch.float32,))
    if scale.numel() == 1 or (per_head is not None and tuple(scale.shape) == (per_head,)):
        return
    allowed = "one element" + ("" if per_head is None else f" or [num_kv_heads] = [{per_head}]")
    raise ValueError(f"{name}: expected {allowed}, got shape {tuple(scale.shape)}")


def check_scale_cache(name: str, scale_cache: torch.Tensor, num_blocks: int, rows: int, block_size: int,
                      rows_name: str) -> None:
    """A dynamic scale cache: fp32, contiguous [num_blocks, rows, block_size] (rows: the KV heads,
    or MLA's 2 parts)."""
    check_tensor(name, scale_cache, dtypes=(torch.float32,), ndim=3, contiguous=True)
    check_shape(name, scale_cache, (num_blocks, rows, block_size), f"[num_blocks, {rows_name}, block_size] fp32")


def check_attention_scales(int8: bool, scales: dict[str, torch.Tensor | None], num_blocks: int, rows: int,
                           block_size: int, rows_name: str, per_head: int | None) -> None:
    """The scales an attention op reads the cache with: with "auto" none (None); with "int8" each
    either a dynamic scale cache [num_blocks, rows, block_size] (3-D) or a static scale (one
    element, or [per_head] when per_head is given), and all of one kind."""
    if not int8:
        for name, scale in scales.items():
            if scale is not None:
                raise ValueError(f"{name}: scales are read only with kv_cache_dtype 'int8'; pass None with 'auto'")
        return
    kinds = set()
    for name, scale in scales.items():
        if scale is None:
            raise TypeError(f"{name}: kv_cache_dtype 'int8' needs a scale (a scale cache or a static scale), got None")
        if isinstance(scale, torch.Tensor) and scale.dim() == 3:
            check_scale_cache(name, scale, num_blocks, rows, block_size, rows_name)
            kinds.add("dynamic")
        else:
            check_static_scale(name, scale, per_head)
            kinds.add("static")
    if len(kinds) > 1:
        raise ValueError(f"{', '.join(scales)}: one a scale cache, one a static scale; pass the same kind")
