"""`torch.ops.ascendtile.cpu_linear`: a linear whose products of few rows run a C++ kernel
(linear_source.py) in place of oneDNN's packed linear or aten's matmul, which CPU level 2's decode
graph calls otherwise (compilation/decompose.py).
- Products of at most FEW_ROWS rows (single-stream decode, batches of 2), in every dtype, read the
  weight once at close to the memory's speed. oneDNN rebuilds its primitive descriptor on every
  call (~14 µs) and read SmolLM2's weights at 19–25 GB/s at 1 and 2 rows; this op at 24–26 GB/s
  (SmolLM2's 121 linears, 30 layers' weights in turn, 2 threads, AMD EPYC with avx512_bf16,
  2026-11-28: bf16 11.2 against 13.0 ms at 1 row, 10.7 against 14.2 at 2; fp32 21.1 against 21.2
  and 21.1 against 25.0; bench/results/2026-11-28-cpu-few-rows-linear.md).
- On an x86 CPU with AVX2 or AVX-512, fp32 products of WIDE_MIN_ROWS to wide_rows() rows (decode
  batches) run the wide kernel, whose reads of the weight overlap its arithmetic (linear_source.py).
- On a CPU with AMX, bf16 products of more than FEW_ROWS to MAX_ROWS rows given the weight's tiles
  (layers/linear.py PackedWeight.with_tiles) run the tile kernel, which streams the tiles in order.

Other products go where the traced call would have sent them, `ascendtile::onednn_linear`
(layers/linear.py: the packed copy, or aten for the few fp32 rows an Intel CPU multiplies faster
there) where there is a packed copy, else aten. rows_served bounds the row counts the kernel takes.

`cpu_linear(x, weight, packed, bias, tiles=None)`: x [..., K] · weight [N, K]ᵀ (+ bias [N]) -> [..., N];
packed is weight's oneDNN-packed copy (layers/linear.py PackedWeight) or None; tiles (bf16 weights of
whole 16 x 32 tiles only) is weight in tile order, [N / 16, K / 32, 16, 16, 2] contiguous, or None.
dtypes: fp32, bf16, fp16 (x, weight and bias alike), fp32 accumulation, the output rounded once. The
input dim must be a multiple of 16 and the weight's rows contiguous (supports). The op's body (the row
bound, the operand checks, which name the wrong argument, and the call) is C++ as well (dispatch.py)."""
from __future__ import annotations

import ctypes
import functools

import torch

from ascendtile.cpu import build, dispatch
from ascendtile.cpu.build import DTYPES
from ascendtile.cpu.linear_source import FEW_ROWS, MAX_ROWS, SOURCE, WIDE_MIN_ROWS  # noqa: F401 (bounds)

_ARGTYPES = [ctypes.c_void_p] * 5 + [ctypes.c_int64] * 6 + [ctypes.c_int]
_kernels: dict[tuple[torch.dtype], ctypes._CFuncPtr] = {}  # (dtype,) -> entry point, once loaded


def load(cache_dir: str, dtypes: list[torch.dtype]) -> bool:
    """Build (or load from cache_dir) the kernels for these dtypes (DTYPES) and the op's C++ body
    (dispatch.py); False where they cannot be built here."""
    flags = build.amx_flags() or build.avx512_flags()  # AMX_FLAGS hold AVX-512F too
    if not dispatch.load_op("cpu_linear", SOURCE, cache_dir, _ARGTYPES, [(dtype,) for dtype in dtypes], _kernels, flags):
        return False
    dispatch.set_linear_kernels(wide_rows=wide_rows(), tiled=tiles_served())
    return True


def rows_served(dtype: torch.dtype) -> int:
    """The most rows of a product in `dtype` that the kernel takes on this CPU: for fp32 where the
    library has the wide kernel its bound (wide_rows; from WIDE_MIN_ROWS rows, the rows between go
    on to oneDNN or aten), for bf16 with tiles where it is built for AMX MAX_ROWS (the tile kernel),
    else FEW_ROWS."""
    if dtype == torch.float32 and wide_rows():
        return wide_rows()
    return MAX_ROWS if dtype == torch.bfloat16 and tiles_served() else FEW_ROWS


@functools.cache  # a property of the process's CPU; compute_logits asks every step (rows_served)
def wide_rows() -> int:
    """The most rows of the fp32 products the wide kernel takes on this CPU (0: no wide kernel):
    MAX_ROWS on x86 CPUs, on AVX-512's 512-bit vectors or AVX2's 256-bit ones (linear_source.py)."""
    return MAX_ROWS if build.avx512_flags() or build.x86_vectors() else 0


def tiles_served() -> bool:
    """Whether this CPU's build has the tile kernel: bf16 products over a weight's tiles
    (model/layers/linear.py PackedWeight.tiles) on AMX."""
    return bool(build.amx_flags())


# `calls`: the kernel launches in this process, what shows a graph runs on it; `tiled_calls`: those
# that multiplied on AMX tiles
__getattr__ = dispatch.calls_attribute("cpu_linear", tiled_calls="cpu_linear:tiled")


def supports(weight: torch.Tensor) -> bool:
    """Whether the kernel serves products with this weight [N, K]."""
    return (weight.is_cpu and weight.dtype in DTYPES and weight.dim() == 2
            and weight.shape[1] % 16 == 0 and weight.stride(1) == 1)


_LIB = torch.library.Library("ascendtile", "FRAGMENT")  # the namespace's DEF: model/layers/expert_dispatch.py
_LIB.define("cpu_linear(Tensor x, Tensor weight, Tensor? packed, Tensor? bias, Tensor? tiles=None) -> Tensor")


def _cpu_linear_fake(x: torch.Tensor, weight: torch.Tensor, packed: torch.Tensor | None,
                     bias: torch.Tensor | None, tiles: torch.Tensor | None = None) -> torch.Tensor:
    return x.new_empty(*x.shape[:-1], weight.shape[0])


# The C++ body (dispatch.py) registers for CPU and MkldnnCPU (a packed weight's key) once loaded,
# which the dispatcher picks over this.
_LIB.impl("cpu_linear", dispatch.not_loaded("cpu_linear"), "CompositeExplicitAutograd")
torch.library.register_fake("ascendtile::cpu_linear", _cpu_linear_fake, lib=_LIB)
