"""`torch.ops.ascendtile.cpu_unified_attention`: unified_attention of any batch (each sequence
bringing one or more new tokens: prefills, prefill chunks, decode rows, mixed) over float paged
caches, as a C++ kernel (unified_attention_source.py) that CPU level 2's general graph calls in
place of the `ascend` op's reference (compilation/decompose.py). The reference gathers each
sequence's keys and values into padded fp32 copies and runs torch's fused attention over them; the
kernel reads the rows from the cache once per tile of queries and multiplies with fp32 FMAs,
skipping the keys a causal tile cannot see.

Head dims with a kernel: paged_operands.HEAD_DIMS; dtypes: fp32, bf16, fp16 (query, caches and out
alike). It shows what the reference shows, up to the order of fp32 sums: key j of sequence b is
visible to its new token t (position p = seqused_k[b] - q_len + t) where j <= p, j < seqused_k[b]
(bounded by the table's columns), its block id is in [0, num_blocks) and p - sliding_window < j (a
window > 0); softcap > 0 caps the scores. A row with no visible key, or a NaN or +inf score, is
written as zeros; unused slots are never read."""
from __future__ import annotations

import ctypes

import torch

from ascendtile.cpu import paged_operands
from ascendtile.cpu.build import load_variants
from ascendtile.cpu.paged_operands import supports
from ascendtile.cpu.unified_attention_source import SOURCE

_ARGTYPES = ([ctypes.c_void_p] * 7 + [ctypes.c_int64] * 15
             + [ctypes.c_float, ctypes.c_float, ctypes.c_int64, ctypes.c_int])
_kernels: dict[tuple[torch.dtype, int], ctypes._CFuncPtr] = {}  # (dtype, head dim) -> entry point, once loaded

calls = 0  # kernel launches in this process: what shows a general graph runs on it


def load(cache_dir: str, variants: list[tuple[torch.dtype, int]]) -> bool:
    """Build (or load from cache_dir) the kernels for these (dtype, head dim) variants; False where
    they cannot be built here."""
    paged_operands.check_variants(variants)
    return load_variants("unified_attention", SOURCE, cache_dir, _ARGTYPES, variants, _kernels)


_LIB = torch.library.Library("ascendtile", "FRAGMENT")  # the namespace's DEF: model/layers/expert_dispatch.py
_LIB.define("cpu_unified_attention(Tensor(a!) out, Tensor query, Tensor key_cache, Tensor value_cache, "
            "Tensor block_table, Tensor cu_seqlens_q, Tensor seqused_k, float scale, float softcap, "
            "int sliding_window) -> ()")


def _explain(out: torch.Tensor, query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
             block_table: torch.Tensor, cu_seqlens_q: torch.Tensor, seqused_k: torch.Tensor) -> None:
    """Raise what is wrong with the arguments (cpu_unified_attention's quick check failed)."""
    paged_operands.check("cpu_unified_attention", _kernels, out, query, key_cache, value_cache, block_table)
    num_seqs = seqused_k.shape[0] if seqused_k.dim() == 1 else -1
    for name, t, rows in (("block_table", block_table, num_seqs), ("seqused_k", seqused_k, num_seqs),
                          ("cu_seqlens_q", cu_seqlens_q, num_seqs + 1)):
        if t.dtype != torch.int32 or t.dim() != 1 + (name == "block_table") or t.shape[0] != rows:
            raise ValueError(f"{name}: int32, {rows} rows for {num_seqs} sequences, got {t.dtype} {tuple(t.shape)}")
    for name, t in (("cu_seqlens_q", cu_seqlens_q), ("seqused_k", seqused_k)):
        if not t.is_contiguous():
            raise ValueError(f"{name}: must be contiguous")
    raise ValueError(f"cu_seqlens_q: must start at 0, never decrease and end at query's {query.shape[0]} rows, "
                     f"got {cu_seqlens_q.tolist()}")


def cpu_unified_attention(out: torch.Tensor, query: torch.Tensor, key_cache: torch.Tensor,
                          value_cache: torch.Tensor, block_table: torch.Tensor, cu_seqlens_q: torch.Tensor,
                          seqused_k: torch.Tensor, scale: float, softcap: float, sliding_window: int) -> None:
    """out [T, H, D] = attention of query [T, H, D] (sequence b's new tokens at rows
    cu_seqlens_q[b]:cu_seqlens_q[b + 1], the last of its seqused_k[b] keys) over key_cache /
    value_cache [num_blocks, block_size, KVH, D] through block_table [B, max_blocks] int32,
    cu_seqlens_q [B + 1] int32 and seqused_k [B] int32; fp32 / bf16 / fp16 throughout, fp32 math;
    causal, softcap > 0 caps the scores (softcap · tanh(s / softcap)), sliding_window > 0 shows
    the last sliding_window keys up to each token."""
    global calls
    dtype = query.dtype
    num_seqs = seqused_k.shape[0]
    # one expression on the hot path; _explain says which argument is wrong (the kernel checks
    # cu_seqlens_q's values itself: no host reads of a tensor here)
    if not (supports(query, key_cache) and (dtype, query.shape[2]) in _kernels and out.dtype == dtype
            and key_cache.dtype == dtype and value_cache.dtype == dtype and block_table.dtype == torch.int32
            and seqused_k.dtype == torch.int32 and cu_seqlens_q.dtype == torch.int32
            and out.shape == query.shape and value_cache.shape == key_cache.shape
            and value_cache.stride() == key_cache.stride() and out.stride(-1) == 1 and query.stride(-1) == 1
            and key_cache.stride(-1) == 1 and block_table.dim() == 2 and block_table.stride(-1) == 1
            and block_table.shape[0] == num_seqs and seqused_k.dim() == 1 and seqused_k.is_contiguous()
            and cu_seqlens_q.shape == (num_seqs + 1,) and cu_seqlens_q.is_contiguous()):
        _explain(out, query, key_cache, value_cache, block_table, cu_seqlens_q, seqused_k)
    heads, dim = query.shape[1:]
    num_blocks, block_size, kv_heads = key_cache.shape[:3]
    status = _kernels[dtype, dim](
        out.data_ptr(), query.data_ptr(), key_cache.data_ptr(), value_cache.data_ptr(), block_table.data_ptr(),
        cu_seqlens_q.data_ptr(), seqused_k.data_ptr(), num_seqs, query.shape[0], heads, kv_heads, num_blocks,
        block_size, block_table.shape[1], block_table.stride(0), query.stride(0), query.stride(1), out.stride(0),
        out.stride(1), key_cache.stride(0), key_cache.stride(1), key_cache.stride(2), scale, softcap, sliding_window,
        torch.get_num_threads())
    if status == 2:  # cu_seqlens_q's values out of order
        _explain(out, query, key_cache, value_cache, block_table, cu_seqlens_q, seqused_k)
    calls += 1


def _cpu_unified_attention_fake(out: torch.Tensor, query: torch.Tensor, key_cache: torch.Tensor,
                                value_cache: torch.Tensor, block_table: torch.Tensor, cu_seqlens_q: torch.Tensor,
                                seqused_k: torch.Tensor, scale: float, softcap: float, sliding_window: int) -> None:
    return None


_LIB.impl("cpu_unified_attention", cpu_unified_attention, "CPU")
torch.library.register_fake("ascendtile::cpu_unified_attention", _cpu_unified_attention_fake, lib=_LIB)


def unified_attention_cpu(out: torch.Tensor, query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                          block_table: torch.Tensor, cu_seqlens_q: torch.Tensor, seqused_k: torch.Tensor,
                          max_seqlen_q: int, max_seqlen_k: int, scale: float, softcap: float, sliding_window: int,
                          kv_cache_dtype: str = "auto", k_scale: torch.Tensor | None = None,
                          v_scale: torch.Tensor | None = None) -> None:
    """unified_attention's signature over cpu_unified_attention, for a general graph's attention
    call (decompose.py puts it there only for float caches, kv_cache_dtype "auto"; max_seqlen_q and
    max_seqlen_k are not read, as in the reference)."""
    torch.ops.ascendtile.cpu_unified_attention.default(out, query, key_cache, value_cache, block_table, cu_seqlens_q,
                                                       seqused_k, scale, softcap, sliding_window)
