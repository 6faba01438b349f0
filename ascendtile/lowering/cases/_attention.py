"""Shared by the attention families' cases: the head layouts every paged kernel is lowered for,
and the signature of the flash attention kernel (unified and varlen launch it)."""
from __future__ import annotations

from ascendtile.kernels.attention_unified import flash_attention_kernel
from ascendtile.lowering.case import signature_types
from ascendtile.lowering.shape_grid import ATTENTION_HEAD_SIZES, ATTENTION_HEADS, BLOCK_SIZES


def paged_layouts(largest_groups: list[tuple[int, int, int, int]]) -> list[tuple[int, int, int, int]]:
    """(heads, kv heads, head size, block size) over every layout, head and block size, plus the
    largest query tiles the kernel admits (`largest_groups`)."""
    return [(h, kv, d, bs) for h, kv in ATTENTION_HEADS for d in ATTENTION_HEAD_SIZES for bs in BLOCK_SIZES] + largest_groups


def flash_types(dtype: str) -> dict[str, str]:
    return signature_types(flash_attention_kernel, dtype, table_ptr="*i32", cu_q_ptr="*i32", kv_ptr="*i32",
                           scale="fp32", softcap="fp32")
