"""The bodies of the CPU kernels' ops (`torch.ops.ascendtile.cpu_decode_attention`,
`cpu_unified_attention`, `cpu_linear`, `cpu_rotary_embedding`, and `cpu_reshape_and_cache_flash`,
whose body is its whole copy) in C++ (dispatch_source.py), registered with torch's dispatcher when
the library loads, so a call goes from the dispatcher to the kernel without Python. Through Python
(checks, ctypes) a decode attention call took 37-60 µs where the kernel's own ctypes call took 19;
through this library 17 (AMD EPYC, AVX2, 1 thread, 1 sequence of 100 keys, 2026-11-28;
bench/results/2026-11-28-cpu-op-bodies.md). A decode graph calls two of these ops 151 times a
SmolLM2 step, a general graph the other three 90 times.

The kernels stay in their own libraries (build.load_variants, no torch headers: ~1.4 s a build);
this one includes torch's headers and links its libraries (13.8–14.2 s on that EPYC), so it is
built once per cache and loaded once per process (the first cache_dir asked for: a second copy
would register the ops again over kernel tables of its own; a later cache_dir gets a copy of the
file). An op's load() puts each variant's entry point into its table (register)."""
from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable
from pathlib import Path

import torch

from ascendtile.cpu import build
from ascendtile.cpu.dispatch_source import SOURCE
from ascendtile.cpu.linear_source import FEW_ROWS, MAX_ROWS, WIDE_MIN_ROWS
from ascendtile.cpu.paged_operands import HEAD_DIMS

_library: ctypes.CDLL | None = None  # once loaded in this process


def _source() -> str:
    return (SOURCE.replace("@HEAD_DIMS@", ", ".join(map(str, HEAD_DIMS)))
            .replace("@DTYPES@", ", ".join(map(str, build.DTYPES)))
            .replace("@LINEAR_MAX_ROWS@", str(MAX_ROWS)).replace("@LINEAR_FEW_ROWS@", str(FEW_ROWS))
            .replace("@LINEAR_WIDE_MIN_ROWS@", str(WIDE_MIN_ROWS)))


def torch_flags() -> tuple[str, ...]:
    """What a source that includes torch's headers and registers ops needs on the command line."""
    root = Path(torch.__file__).parent
    return ("-std=c++20", "-w", f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
            f"-I{root / 'include'}", f"-L{root / 'lib'}", "-lc10", "-ltorch_cpu", f"-Wl,-rpath,{root / 'lib'}")


def library(cache_dir: str) -> ctypes.CDLL | None:
    """The op library, built into cache_dir (the first time in this process) and loaded, which
    registers the ops' C++ bodies; None (with build's warning) where it cannot be built here. A
    later cache_dir gets a copy of the loaded file, so that a cache_dir holds every library its
    compiles used: a test's second process on a cache_dir of its own rebuilt it (~16 s)."""
    global _library
    if _library is not None:
        _copy_loaded_into(cache_dir)
    else:
        _library = build.load_library("dispatch", _source(), cache_dir, torch_flags())
        if _library is not None:
            _library.ascendtile_dtype_index.argtypes = [ctypes.c_char_p]
            _library.ascendtile_set_decode_attention.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_void_p]
            _library.ascendtile_set_unified_attention.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_void_p]
            _library.ascendtile_set_linear.argtypes = [ctypes.c_int, ctypes.c_void_p]
            _library.ascendtile_set_rotary_embedding.argtypes = [ctypes.c_int, ctypes.c_void_p]
            _library.ascendtile_set_linear_max_rows.argtypes = [ctypes.c_int64]
            _library.ascendtile_set_linear_kernels.argtypes = [ctypes.c_int64, ctypes.c_int]
            _library.ascendtile_calls.argtypes, _library.ascendtile_calls.restype = [ctypes.c_char_p], ctypes.c_int64
    return _library


@functools.lru_cache(maxsize=None)
def _copy_loaded_into(cache_dir: str) -> None:
    """Once per process and cache_dir (as load_library builds): the loaded library's file copied
    there. Its path hashes the source and asks for torch's flags, ~0.2 ms, and ops' loads call
    library() once per node of a graph being compiled."""
    path = build.library_path("dispatch", _source(), cache_dir, torch_flags())
    if path is not None:
        build.copy_library(Path(_loaded()._name), path)


def _loaded() -> ctypes.CDLL:
    if _library is None:
        raise RuntimeError("ascendtile.cpu.dispatch: the library is not loaded (an op's load() loads it)")
    return _library


def _stem(op: str) -> str:
    """op's name without its `cpu_` prefix: its module in ascendtile.cpu, its kernel library and
    its table setter in this one."""
    return op.removeprefix("cpu_")


def register(op: str, variant: tuple, kernel: ctypes._CFuncPtr | None) -> None:
    """Make `kernel` the entry point of op's variant (dtype, *sizes) in the loaded library's table;
    None takes the variant out again."""
    dtype = _loaded().ascendtile_dtype_index(str(variant[0]).encode())
    if dtype < 0 or (op.endswith("attention") and variant[1] not in HEAD_DIMS):
        raise ValueError(f"variant: no table entry for {variant} (dtypes {build.DTYPES}, head dims {HEAD_DIMS})")
    pointer = None if kernel is None else ctypes.cast(kernel, ctypes.c_void_p)
    if op in ("cpu_decode_attention", "cpu_unified_attention"):  # (dtype, head dim)
        getattr(_library, f"ascendtile_set_{_stem(op)}")(dtype, variant[1], pointer)
    elif op in ("cpu_linear", "cpu_rotary_embedding"):  # (dtype,)
        getattr(_library, f"ascendtile_set_{_stem(op)}")(dtype, pointer)
    else:
        raise ValueError(f"op: no C++ body for {op!r}")


def set_linear_max_rows(rows: int) -> None:
    """cpu_linear's row bound: products of up to `rows` rows (at most linear_source.MAX_ROWS) run
    the kernel, more go to oneDNN or aten. Loaded library only."""
    if not 0 <= rows <= MAX_ROWS:
        raise ValueError(f"rows: at most the kernel's {MAX_ROWS}, got {rows}")
    _loaded().ascendtile_set_linear_max_rows(rows)


def set_linear_kernels(wide_rows: int, tiled: bool) -> None:
    """Which of linear_source.py's kernels for more than FEW_ROWS rows cpu_linear's loaded library
    serves: the wide one for fp32 products of WIDE_MIN_ROWS to `wide_rows` rows (at most MAX_ROWS;
    0: none; linear.wide_rows) and the tile one (bf16 products of up to MAX_ROWS rows over a
    weight's tiles, AMX builds), so that the body sends them those products and sends them on
    otherwise. Loaded library only; linear.load sets it."""
    if not 0 <= wide_rows <= MAX_ROWS:
        raise ValueError(f"wide_rows: at most the kernel's {MAX_ROWS}, got {wide_rows}")
    _loaded().ascendtile_set_linear_kernels(wide_rows, int(tiled))


def calls(op: str) -> int:
    """The kernel launches of `op` in this process (0 before the library loads)."""
    return 0 if _library is None else _library.ascendtile_calls(op.encode())


def load_op(op: str, source: str, cache_dir: str, argtypes: list, variants: list[tuple], kernels: dict,
            extra_flags: tuple[str, ...] = ()) -> bool:
    """An op's load(): the library, then op's kernel variants (build.load_variants of `source` with
    extra_flags, the library named after op without its `cpu_` prefix, entry points into
    `kernels`), each put into op's table; False where either cannot be built here."""
    if library(cache_dir) is None or not build.load_variants(_stem(op), source, cache_dir, argtypes,
                                                             variants, kernels, extra_flags):
        return False
    for variant in variants:
        register(op, variant, kernels[variant])
    return True


def calls_attribute(op: str, **counters: str) -> Callable[[str], int]:
    """A module's __getattr__ whose `calls` is calls(op): what shows a graph runs op's kernel; each
    keyword is another attribute and the counter behind it (`dot_calls="cpu_decode_attention:dot"`)."""
    counters = {"calls": op, **counters}

    def module_getattr(name: str) -> int:
        if name in counters:
            return calls(counters[name])
        raise AttributeError(f"module 'ascendtile.cpu.{_stem(op)}' has no attribute {name!r}")
    return module_getattr


def not_loaded(op: str) -> Callable[..., None]:
    """op's Python fallback, registered for CompositeExplicitAutograd: until the library loads, a
    call says so (once it does, the dispatcher picks the C++ body, registered for CPU)."""
    def fallback(*args, **kwargs) -> None:
        raise RuntimeError(f"{op}: no kernel is loaded in this process (ascendtile.cpu.{_stem(op)}.load)")
    return fallback
