"""Build a C++ source into a shared library with the system compiler (`CXX`, else g++) and load it
with ctypes, cached under `<cache_dir>/cpu/` by a hash of the source, the flags and the compiler's
version, so a second process (or a second compile) loads the file the first one wrote.

A kernel source holds templates and an `EXPORT(NAME, T, ...)` macro that instantiates one entry
point; a library holds only the variants (element type, sizes) a caller asks for: a model's
compile builds the one head dim and dtype it runs, ~1.4 s, where every variant of an attention
kernel took 11-13 s (AMD EPYC, AVX2, g++ 12, 2026-11-28).

OpenMP: the library links libgomp.so.1, which resolves to the copy torch has already loaded, so its
parallel regions share torch's thread pool instead of starting a second one. x86 CPUs whose ATen
kernels are AVX2 or AVX-512 builds get AVX2 + FMA + F16C code (the kernels use 256-bit vectors:
no AVX-512 needed, and the library runs on any such CPU that shares the cache)."""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import warnings
from pathlib import Path

import torch

BASE_FLAGS = ("-O3", "-std=c++17", "-fopenmp", "-shared", "-fPIC")
X86_VECTOR_FLAGS = ("-mavx2", "-mfma", "-mf16c")
# a kernel with AMX tile products (amx_source.py), on CPUs with AMX and AVX-512 BF16 (every AMX CPU
# has both): its library is a file of its own, as the flags are part of the name
AMX_FLAGS = ("-mamx-tile", "-mamx-bf16", "-mavx512f", "-mavx512bf16")
# the element types a kernel variant can take: their C types in vector_source.py's prelude, which
# widen / narrow serve
C_TYPES = {torch.float32: "float", torch.bfloat16: "bf16_t", torch.float16: "_Float16"}
DTYPES = tuple(C_TYPES)

compiler_runs = 0  # compiles this process started (a cached library is loaded without one)


def x86_vectors() -> bool:
    """Whether libraries are built with X86_VECTOR_FLAGS here: x86 CPUs whose ATen kernels are AVX2
    or AVX-512 builds."""
    return platform.machine() in ("x86_64", "AMD64") and torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512")


def compile_flags() -> tuple[str, ...]:
    """The compiler flags for this machine: BASE_FLAGS, plus X86_VECTOR_FLAGS where x86_vectors()."""
    return BASE_FLAGS + (X86_VECTOR_FLAGS if x86_vectors() else ())


# a kernel with 512-bit vectors (linear_source.py's wide kernel), on CPUs with AVX-512F
AVX512_FLAGS = ("-mavx512f",)


def avx512_flags() -> tuple[str, ...]:
    """AVX512_FLAGS where this CPU has AVX-512F, else none."""
    return AVX512_FLAGS if torch.cpu._is_avx512_supported() else ()


# bf16 dot products on 512-bit vectors (decode_attention_source.py's scores), on CPUs with AVX-512 BF16
AVX512_BF16_FLAGS = AVX512_FLAGS + ("-mavx512bf16",)


def avx512_bf16_flags() -> tuple[str, ...]:
    """AVX512_BF16_FLAGS where this CPU has AVX-512 BF16, else avx512_flags()."""
    return AVX512_BF16_FLAGS if torch.cpu._is_avx512_bf16_supported() else avx512_flags()


def amx_flags() -> tuple[str, ...]:
    """AMX_FLAGS where this CPU has AMX tiles and AVX-512 BF16, else none."""
    amx = torch.cpu._is_amx_tile_supported() and torch.cpu._is_avx512_bf16_supported()
    return AMX_FLAGS if amx else ()


@functools.lru_cache(maxsize=None)
def _compiler_version(compiler: str) -> str:
    done = subprocess.run([compiler, "--version"], capture_output=True, text=True)
    return f"{done.returncode}\n{done.stdout}"


def compiler_name() -> str:
    """The C++ compiler to build with: `CXX`, else g++."""
    return os.environ.get("CXX", "g++")


def library_path(name: str, source: str, cache_dir: str, extra_flags: tuple[str, ...] = ()) -> Path | None:
    """Where `source` built with this compiler, these flags and extra_flags lives in `cache_dir`;
    None (with a warning) when there is no working compiler."""
    compiler = shutil.which(compiler_name())
    if compiler is None:
        warnings.warn(f"ascendtile.cpu: no C++ compiler ({compiler_name()}): {name} is not built, "
                      f"the reference path runs instead", RuntimeWarning, stacklevel=2)
        return None
    flags = " ".join(compile_flags() + extra_flags)
    key = hashlib.sha256("\0".join([source, flags, _compiler_version(compiler)]).encode())
    return Path(cache_dir) / "cpu" / f"{name}-{key.hexdigest()[:20]}.so"


@functools.lru_cache(maxsize=None)
def load_library(name: str, source: str, cache_dir: str, extra_flags: tuple[str, ...] = ()) -> ctypes.CDLL | None:
    """The library built from `source` (once per process and cache_dir), or None with a warning
    when it cannot be built here. extra_flags follow the source on the command line (include
    directories, libraries to link)."""
    global compiler_runs
    path = library_path(name, source, cache_dir, extra_flags)
    if path is None:
        return None
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
            src, out = Path(tmp) / f"{name}.cpp", Path(tmp) / path.name
            src.write_text(source)
            compiler_runs += 1
            done = subprocess.run([compiler_name(), *compile_flags(), str(src), "-o", str(out), *extra_flags],
                                  capture_output=True, text=True)
            if done.returncode != 0:
                warnings.warn(f"ascendtile.cpu: building {name} failed, the reference path runs instead:\n"
                              f"{done.stderr[-2000:]}", RuntimeWarning, stacklevel=2)
                return None
            os.replace(out, path)  # atomic: a process loading it concurrently sees the whole file or none
    return ctypes.CDLL(str(path))


def copy_library(built: Path, path: Path) -> None:
    """Put a copy of the library file `built` at `path` (another cache_dir's place for the same
    source, flags and compiler), unless one is there: a process that starts with that cache_dir
    then loads it instead of building it. A copy that fails (a read-only or full cache_dir) only
    warns: this process has the library loaded, and that one would build it."""
    if path.is_file():
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
            shutil.copy2(built, Path(tmp) / path.name)
            os.replace(Path(tmp) / path.name, path)  # atomic, as a build's
    except OSError as exc:
        warnings.warn(f"ascendtile.cpu: could not copy {built.name} into {path.parent}: {exc}", RuntimeWarning,
                      stacklevel=2)


def entry_name(name: str, variant: tuple) -> str:
    """The entry point of `name`'s variant (dtype, *sizes): `unified_attention_bfloat16_64`."""
    dtype, *sizes = variant
    return "_".join([name, str(dtype).removeprefix("torch."), *map(str, sizes)])


def load_variants(name: str, source: str, cache_dir: str, argtypes: list, variants: list[tuple],
                  into: dict[tuple, ctypes._CFuncPtr], extra_flags: tuple[str, ...] = ()) -> bool:
    """Put the entry point of each variant (dtype, *sizes) of kernel `name` into `into`, typed with
    argtypes and an int status; those not there yet come from one library of `source` plus an
    EXPORT(entry, C type, *sizes) line each, built with extra_flags. False (nothing put) where it
    cannot be built here; ValueError for a dtype outside DTYPES."""
    unserved = sorted({str(v[0]) for v in variants if v[0] not in C_TYPES})
    if unserved:
        raise ValueError(f"variants: no kernel for the dtypes {unserved}; dtypes {DTYPES}")
    missing = [v for v in dict.fromkeys(variants) if v not in into]
    if not missing:
        return True
    exports = "".join(f"EXPORT({', '.join([entry_name(name, v), C_TYPES[v[0]], *map(str, v[1:])])})\n"
                      for v in missing)
    library = load_library(name, source + exports, cache_dir, extra_flags)
    if library is None:
        return False
    for variant in missing:
        kernel = getattr(library, entry_name(name, variant))
        kernel.argtypes, kernel.restype = argtypes, ctypes.c_int
        into[variant] = kernel
    return True
