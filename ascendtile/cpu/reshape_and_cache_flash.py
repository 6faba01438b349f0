"""`torch.ops.ascendtile.cpu_reshape_and_cache_flash`: reshape_and_cache_flash into float caches
(kv_cache_dtype "auto") as a C++ copy that CPU level 2's general graph calls in place of the
`ascend` op's reference (compilation/decompose.py). The reference checks the slots' range with a
host read and writes each cache with an `index_copy_`, ~130–160 µs a call for SmolLM2's one-prompt
prefill and ~600 µs for 2,048 tokens (bf16, 2 threads, Intel Xeon with AMX, 2026-11-30); the body
copies each token's rows straight to its slot (bench/results/2026-11-30-cpu-kv-write.md). A copy
needs no vector code, so the op has no kernel library of its own: its body in the op library
(dispatch.py) is the copy.

`cpu_reshape_and_cache_flash(key, value, key_cache, value_cache, slot_mapping)`: for token t <
slot_mapping's length, key[t] and value[t] [KVH, D] go to key_cache / value_cache [num_blocks,
block_size, KVH, D] at block slot // block_size, row slot % block_size; a slot outside
[0, num_blocks · block_size) (-1 = padding) is skipped and its rows left as they were, as in the
reference. dtypes: fp32, bf16, fp16, key, value and the caches alike; slot_mapping int32 or int64,
contiguous; key and value may have more rows than slots, and any strides whose last dim is
contiguous (slices of a fused qkv row), as may the caches. Two tokens of one slot may be copied by
two threads at once and leave a mix of their rows (the runtime maps no two tokens to one slot).
The body's checks name the wrong argument."""
from __future__ import annotations

import torch

from ascendtile.cpu import dispatch
from ascendtile.cpu.build import DTYPES

# `calls`: the copies in this process, what shows a graph runs the op
__getattr__ = dispatch.calls_attribute("cpu_reshape_and_cache_flash")


def load(cache_dir: str) -> bool:
    """Build (or load from cache_dir) the op library, which holds the body; False where it cannot be
    built here."""
    return dispatch.library(cache_dir) is not None


def supports(key: torch.Tensor, key_cache: torch.Tensor) -> bool:
    """Whether the op serves rows key [T, KVH, D] into key_cache [num_blocks, block_size, KVH, D]."""
    return (key.device.type == "cpu" and key.dtype in DTYPES and key_cache.dtype == key.dtype and key.dim() == 3
            and key_cache.dim() == 4 and key.stride(-1) == 1 and key_cache.stride(-1) == 1)


_LIB = torch.library.Library("ascendtile", "FRAGMENT")  # the namespace's DEF: model/layers/expert_dispatch.py
_LIB.define("cpu_reshape_and_cache_flash(Tensor key, Tensor value, Tensor(a!) key_cache, Tensor(b!) value_cache, "
            "Tensor slot_mapping) -> ()")


def _cpu_reshape_and_cache_flash_fake(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor,
                                      value_cache: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    return None


# The C++ body (dispatch.py) registers for CPU once loaded, which the dispatcher picks over this.
_LIB.impl("cpu_reshape_and_cache_flash", dispatch.not_loaded("cpu_reshape_and_cache_flash"),
          "CompositeExplicitAutograd")
torch.library.register_fake("ascendtile::cpu_reshape_and_cache_flash", _cpu_reshape_and_cache_flash_fake, lib=_LIB)


def reshape_and_cache_flash_cpu(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor,
                                value_cache: torch.Tensor, slot_mapping: torch.Tensor, kv_cache_dtype: str,
                                k_scale: torch.Tensor, v_scale: torch.Tensor, k_scale_cache: torch.Tensor | None = None,
                                v_scale_cache: torch.Tensor | None = None) -> None:
    """reshape_and_cache_flash's signature over cpu_reshape_and_cache_flash, for a general graph's KV
    write (decompose.py puts it there only for float caches, kv_cache_dtype "auto", where the
    scales are not read)."""
    torch.ops.ascendtile.cpu_reshape_and_cache_flash.default(key, value, key_cache, value_cache, slot_mapping)
