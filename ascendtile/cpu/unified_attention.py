"""`torch.ops.ascendtile.cpu_unified_attention`: unified_attention of any batch (each sequence
bringing one or more new tokens: prefills, prefill chunks, decode rows, mixed) over float paged
caches, as a C++ kernel (unified_attention_source.py) that CPU level 2's general graph calls in
place of the `ascend` op's reference (compilation/decompose.py). The reference gathers each
sequence's keys and values into padded fp32 copies and runs torch's fused attention over them; the
kernel reads the rows from the cache once per tile of queries and multiplies with fp32 FMAs (bf16
on an AMX CPU: AMX tiles, unified_attention_source.py), skipping the keys a causal tile cannot see.

`cpu_unified_attention(out, query, key_cache, value_cache, block_table, cu_seqlens_q, seqused_k,
scale, softcap, sliding_window)`: out [T, H, D] = attention of query [T, H, D] (sequence b's new
tokens at rows cu_seqlens_q[b]:cu_seqlens_q[b + 1], the last of its seqused_k[b] keys) over
key_cache / value_cache [num_blocks, block_size, KVH, D] through block_table [B, max_blocks] int32,
cu_seqlens_q [B + 1] int32 and seqused_k [B] int32; fp32 math; causal. The op's body (its operand
checks, which name the wrong argument, and the call) is C++ as well (dispatch.py); the kernel
checks cu_seqlens_q's values itself, so no tensor is read on the host first.

Head dims with a kernel: paged_operands.HEAD_DIMS; dtypes: fp32, bf16, fp16 (query, caches and out
alike). It shows what the reference shows, up to the order of fp32 sums (on AMX tiles, with the
probabilities held to ~16 bits): key j of sequence b is
visible to its new token t (position p = seqused_k[b] - q_len + t) where j <= p, j < seqused_k[b]
(bounded by the table's columns), its block id is in [0, num_blocks) and p - sliding_window < j (a
window > 0); softcap > 0 caps the scores. A row with no visible key, or a NaN or +inf score, is
written as zeros; unused slots are never read."""
from __future__ import annotations

import ctypes

import torch

from ascendtile.cpu import build, dispatch, paged_operands
from ascendtile.cpu.paged_operands import supports  # noqa: F401 (decompose.py asks it)
from ascendtile.cpu.unified_attention_source import SOURCE

_ARGTYPES = ([ctypes.c_void_p] * 7 + [ctypes.c_int64] * 15
             + [ctypes.c_float, ctypes.c_float, ctypes.c_int64, ctypes.c_int])
_kernels: dict[tuple[torch.dtype, int], ctypes._CFuncPtr] = {}  # (dtype, head dim) -> entry point, once loaded

def load(cache_dir: str, variants: list[tuple[torch.dtype, int]]) -> bool:
    """Build (or load from cache_dir) the kernels for these (dtype, head dim) variants and the op's
    C++ body (dispatch.py); False where they cannot be built here."""
    paged_operands.check_variants(variants)
    return dispatch.load_op("cpu_unified_attention", SOURCE, cache_dir, _ARGTYPES, variants, _kernels,
                            build.amx_flags())


# `calls`: the kernel launches in this process, what shows a graph runs on it; `tiled_calls`: those
# that multiplied on AMX tiles (bf16, a head dim that is a multiple of 32, an AMX CPU)
__getattr__ = dispatch.calls_attribute("cpu_unified_attention", tiled_calls="cpu_unified_attention:tiled")


_LIB = torch.library.Library("ascendtile", "FRAGMENT")  # the namespace's DEF: model/layers/expert_dispatch.py
_LIB.define("cpu_unified_attention(Tensor(a!) out, Tensor query, Tensor key_cache, Tensor value_cache, "
            "Tensor block_table, Tensor cu_seqlens_q, Tensor seqused_k, float scale, float softcap, "
            "int sliding_window) -> ()")


def _cpu_unified_attention_fake(out: torch.Tensor, query: torch.Tensor, key_cache: torch.Tensor,
                                value_cache: torch.Tensor, block_table: torch.Tensor, cu_seqlens_q: torch.Tensor,
                                seqused_k: torch.Tensor, scale: float, softcap: float, sliding_window: int) -> None:
    return None


# The C++ body (dispatch.py) registers for CPU once loaded, which the dispatcher picks over this.
_LIB.impl("cpu_unified_attention", dispatch.not_loaded("cpu_unified_attention"), "CompositeExplicitAutograd")
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
