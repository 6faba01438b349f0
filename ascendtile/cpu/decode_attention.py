"""`torch.ops.ascendtile.cpu_decode_attention`: unified_attention of a decode batch (one new token
per sequence) over float paged caches, as a C++ kernel (decode_attention_source.py) that CPU level
2's decode graph calls in place of the traceable form Inductor compiles
(compilation/decompose.py). Inductor's code for that form sums each key's head-dim product
horizontally, once per query head, and reads each key row once per query head of its group; this
kernel reads each row once for the whole group and sums eight keys' products at a time. A SmolLM2
layer (9 / 3 heads, head dim 64, 32 sequences of 129-192 keys, bf16, 2 threads, AMD EPYC with
avx512_bf16, 2026-11-27), 30 layers' caches in turn: 519 µs against 834; at batch 1 23 against 45,
most of it the op's host cost (bench/results/2026-11-27-cpu-decode-attention-kernel.md).

`cpu_decode_attention(out, query, key_cache, value_cache, block_table, seqused_k, max_seqlen_k, scale,
softcap, sliding_window)`: out [B, H, D] = attention of query [B, H, D] (row b: sequence b's new
token) over key_cache / value_cache [num_blocks, block_size, KVH, D] through block_table
[B, max_blocks] int32 and seqused_k [B] int32; fp32 math; softcap > 0 caps the scores
(softcap · tanh(s / softcap)), sliding_window > 0 shows the last sliding_window keys. The op's body
(its operand checks, which name the wrong argument, and the call) is C++ as well (dispatch.py).

Head dims with a kernel: paged_operands.HEAD_DIMS; dtypes: fp32, bf16, fp16 (query, caches and out
alike). What it shows equals the traceable form (unified_attention_decode_traceable) up to the order
of fp32 sums: a key is visible where j < min(seqused_k[b], max_seqlen_k rounded up to a block), its
block id is in [0, num_blocks) and it is inside the sliding window; hidden rows are never read; a
query with no visible key, or a NaN or infinite score, gets 0."""
from __future__ import annotations

import ctypes

import torch

from ascendtile.cpu import build, dispatch, paged_operands
from ascendtile.cpu.decode_attention_source import SOURCE
from ascendtile.cpu.paged_operands import supports  # noqa: F401 (decompose.py asks it)

_ARGTYPES = ([ctypes.c_void_p] * 6 + [ctypes.c_int64] * 15
             + [ctypes.c_float, ctypes.c_float, ctypes.c_int64, ctypes.c_int])
_kernels: dict[tuple[torch.dtype, int], ctypes._CFuncPtr] = {}  # (dtype, head dim) -> entry point, once loaded


def load(cache_dir: str, variants: list[tuple[torch.dtype, int]]) -> bool:
    """Build (or load from cache_dir) the kernels for these (dtype, head dim) variants and the op's
    C++ body (dispatch.py); False where they cannot be built here."""
    paged_operands.check_variants(variants)
    return dispatch.load_op("cpu_decode_attention", SOURCE, cache_dir, _ARGTYPES, variants, _kernels,
                            build.avx512_bf16_flags())


# `calls`: the kernel launches in this process, what shows a graph runs on it; `dot_calls`: those
# that scored with bf16 dot products (bf16, a head dim that is a multiple of 32, AVX-512 BF16)
__getattr__ = dispatch.calls_attribute("cpu_decode_attention", dot_calls="cpu_decode_attention:dot")


_LIB = torch.library.Library("ascendtile", "FRAGMENT")  # the namespace's DEF: model/layers/expert_dispatch.py
_LIB.define("cpu_decode_attention(Tensor(a!) out, Tensor query, Tensor key_cache, Tensor value_cache, "
            "Tensor block_table, Tensor seqused_k, SymInt max_seqlen_k, float scale, float softcap, "
            "int sliding_window) -> ()")


def _cpu_decode_attention_fake(out: torch.Tensor, query: torch.Tensor, key_cache: torch.Tensor,
                               value_cache: torch.Tensor, block_table: torch.Tensor, seqused_k: torch.Tensor,
                               max_seqlen_k: int, scale: float, softcap: float, sliding_window: int) -> None:
    return None


# The C++ body (dispatch.py) registers for CPU once loaded, which the dispatcher picks over this.
_LIB.impl("cpu_decode_attention", dispatch.not_loaded("cpu_decode_attention"), "CompositeExplicitAutograd")
torch.library.register_fake("ascendtile::cpu_decode_attention", _cpu_decode_attention_fake, lib=_LIB)


def unified_attention_decode_cpu(out: torch.Tensor, query: torch.Tensor, key_cache: torch.Tensor,
                                 value_cache: torch.Tensor, block_table: torch.Tensor, cu_seqlens_q: torch.Tensor,
                                 seqused_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int, scale: float,
                                 softcap: float, sliding_window: int, kv_cache_dtype: str = "auto",
                                 k_scale: torch.Tensor | None = None, v_scale: torch.Tensor | None = None) -> None:
    """unified_attention's signature over cpu_decode_attention, for a decode graph's attention call
    (decompose.py puts it there only for float caches, kv_cache_dtype "auto"; cu_seqlens_q and
    max_seqlen_q are not read: query row b is sequence b)."""
    torch.ops.ascendtile.cpu_decode_attention.default(out, query, key_cache, value_cache, block_table, seqused_k,
                                                      max_seqlen_k, scale, softcap, sliding_window)
