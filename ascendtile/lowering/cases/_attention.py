"""Shared by the attention families' cases: the head layouts every paged kernel is lowered for,
the signature of the flash attention kernel (unified and varlen launch it), and the argument
types of an int8 paged cache (ops/_kv_quant.py)."""
from __future__ import annotations

from ascendtile.kernels.attention_unified import flash_attention_kernel
from ascendtile.lowering.case import signature_types
from ascendtile.lowering.shape_grid import ATTENTION_HEAD_SIZES, ATTENTION_HEADS, BLOCK_SIZES


def paged_layouts(largest_groups: list[tuple[int, int, int, int]]) -> list[tuple[int, int, int, int]]:
    """(heads, kv heads, head size, block size) over every layout, head and block size, plus the
    largest query tiles the kernel admits (`largest_groups`)."""
    return [(h, kv, d, bs) for h, kv in ATTENTION_HEADS for d in ATTENTION_HEAD_SIZES for bs in BLOCK_SIZES] + largest_groups


def int8_layouts(largest_groups: list[tuple[int, int, int, int]]) -> list[tuple[int, int, int, int]]:
    """The layouts an int8 cache is lowered for: every layout and head size at the NPU's block
    size (128, the widest key tiles), plus the largest query tiles."""
    return [(h, kv, d, 128) for h, kv in ATTENTION_HEADS for d in ATTENTION_HEAD_SIZES] + largest_groups


def cache_types(int8: bool) -> dict[str, str]:
    """Argument types of the K/V caches and their scales (ks_ptr / vs_ptr: the query, never read,
    for a float cache; fp32 scales for int8)."""
    return dict(k_ptr="*i8", v_ptr="*i8", ks_ptr="*fp32", vs_ptr="*fp32") if int8 else {}


def flash_types(dtype: str, int8: bool = False) -> dict[str, str]:
    return signature_types(flash_attention_kernel, dtype, table_ptr="*i32", cu_q_ptr="*i32", kv_ptr="*i32",
                           scale="fp32", softcap="fp32", **cache_types(int8))
