"""`torch.ops.ascendtile.cpu_linear`: a linear whose products of at most MAX_ROWS rows (single-stream
decode, batches of 2) run a C++ kernel (linear_source.py) that reads the weight once at close to
the memory's speed, in place of oneDNN's packed linear or aten's matmul, which CPU level 2's decode
graph calls otherwise (compilation/decompose.py). oneDNN rebuilds its primitive descriptor on every
call (~14 µs) and read SmolLM2's weights at 19–25 GB/s at 1 and 2 rows; this op at 24–26 GB/s
(SmolLM2's 121 linears, 30 layers' weights in turn, 2 threads, AMD EPYC with avx512_bf16,
2026-11-28: bf16 11.2 against 13.0 ms at 1 row, 10.7 against 14.2 at 2; fp32 21.1 against 21.2
and 21.1 against 25.0; bench/results/2026-11-28-cpu-few-rows-linear.md). From 3 rows its 256-bit
fp32 FMAs bind it, and oneDNN's bf16 dot products won in some runs: more rows go where the traced
call would have sent them, `ascendtile::onednn_linear` (layers/linear.py: the packed copy, or aten
for the few fp32 rows an Intel CPU multiplies faster there) where there is a packed copy, else
aten.

dtypes: fp32, bf16, fp16 (x, weight and bias alike), fp32 accumulation, the output rounded once.
The input dim must be a multiple of 16 and the weight's rows contiguous (supports)."""
from __future__ import annotations

import ctypes
import math

import torch
import torch.nn.functional as F

from ascendtile.cpu.build import DTYPES, load_variants
from ascendtile.cpu.linear_source import SOURCE

MAX_ROWS = 2
_ARGTYPES = [ctypes.c_void_p] * 4 + [ctypes.c_int64] * 6 + [ctypes.c_int]
_kernels: dict[tuple[torch.dtype], ctypes._CFuncPtr] = {}  # (dtype,) -> entry point, once loaded

calls = 0  # kernel launches in this process: what shows a decode graph runs on it


def load(cache_dir: str, dtypes: list[torch.dtype]) -> bool:
    """Build (or load from cache_dir) the kernels for these dtypes (DTYPES); False where they cannot
    be built here."""
    return load_variants("linear", SOURCE, cache_dir, _ARGTYPES, [(dtype,) for dtype in dtypes], _kernels)


def supports(weight: torch.Tensor) -> bool:
    """Whether the kernel serves products with this weight [N, K]."""
    return (weight.is_cpu and weight.dtype in DTYPES and weight.dim() == 2
            and weight.shape[1] % 16 == 0 and weight.stride(1) == 1)


_LIB = torch.library.Library("ascendtile", "FRAGMENT")  # the namespace's DEF: model/layers/expert_dispatch.py
_LIB.define("cpu_linear(Tensor x, Tensor weight, Tensor? packed, Tensor? bias) -> Tensor")


def _explain(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
    """Raise what is wrong with the arguments (cpu_linear's quick check failed)."""
    if not supports(weight):
        raise ValueError(f"weight: no kernel for {weight.dtype} {tuple(weight.shape)} with strides {weight.stride()} "
                         f"(2-D, rows contiguous, the input dim a multiple of 16; dtypes {DTYPES})")
    if (weight.dtype,) not in _kernels:
        raise RuntimeError(f"cpu_linear: the kernel is not loaded for {weight.dtype} (ascendtile.cpu.linear.load)")
    if x.dtype != weight.dtype or x.shape[-1] != weight.shape[1]:
        raise ValueError(f"x: {x.dtype} {tuple(x.shape)} does not fit weight {weight.dtype} {tuple(weight.shape)}")
    raise ValueError(f"bias: expected {weight.dtype} ({weight.shape[0]},), got {bias.dtype} {tuple(bias.shape)}")


def cpu_linear(x: torch.Tensor, weight: torch.Tensor, packed: torch.Tensor | None,
               bias: torch.Tensor | None) -> torch.Tensor:
    """x [..., K] · weight [N, K]ᵀ (+ bias [N]) -> [..., N], all fp32, bf16 or fp16. Up to MAX_ROWS
    rows: the kernel. More: onednn_linear over `packed`, weight's oneDNN-packed copy
    (layers/linear.py PackedWeight), where given, else aten."""
    global calls
    flat = x.dim() == 2  # a graph's calls: no reshape or view on the hot path (~2 µs of ~11)
    count = x.shape[0] if flat else math.prod(x.shape[:-1])
    if x.dim() == 0 or count > MAX_ROWS:
        if packed is not None:  # registered by model/layers/linear.py, which made the pack
            return torch.ops.ascendtile.onednn_linear.default(x, weight, packed, bias)
        return F.linear(x, weight, bias)
    dtype = x.dtype
    kernel = _kernels.get((dtype,))
    # one expression on the hot path (121 calls a SmolLM2 decode step); _explain says what is wrong
    if not (kernel is not None and weight.dtype == dtype and supports(weight) and x.shape[-1] == weight.shape[1]
            and (bias is None or (bias.dtype == dtype and bias.shape == (weight.shape[0],) and bias.is_contiguous()))):
        _explain(x, weight, bias)
    rows = x if flat else x.reshape(count, x.shape[-1])
    if rows.stride(-1) != 1:
        rows = rows.contiguous()
    out = torch.empty(rows.shape[0], weight.shape[0], dtype=dtype)
    status = kernel(out.data_ptr(), rows.data_ptr(), weight.data_ptr(), 0 if bias is None else bias.data_ptr(),
                    rows.shape[0], weight.shape[0], weight.shape[1], rows.stride(0), weight.stride(0), out.stride(0),
                    torch.get_num_threads())
    assert status == 0, f"cpu_linear: no kernel for {count} rows of {x.shape[-1]}"  # ruled out above
    calls += 1
    return out if flat else out.view(*x.shape[:-1], weight.shape[0])


def _cpu_linear_fake(x: torch.Tensor, weight: torch.Tensor, packed: torch.Tensor | None,
                     bias: torch.Tensor | None) -> torch.Tensor:
    return x.new_empty(*x.shape[:-1], weight.shape[0])


# CompositeExplicitAutograd: the packed tensor's MkldnnCPU key would miss a CPU-only kernel.
_LIB.impl("cpu_linear", cpu_linear, "CompositeExplicitAutograd")
torch.library.register_fake("ascendtile::cpu_linear", _cpu_linear_fake, lib=_LIB)
