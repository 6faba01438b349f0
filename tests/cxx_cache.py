"""The test session's C++ compiler: the real one (`CXX`, else g++) behind a wrapper that builds each
distinct compile once per run and copies the result for every later identical one.

The suite compiles the same sources many times over: each test that needs a fresh compile cache
gets an empty cache_dir, and each pytest-xdist worker has its own (tests/conftest.py), so
Inductor's kernels and our CPU libraries, whose file names are hashes of their sources and flags,
were built again in every cache_dir that asked for them: a whole run on a 2-core AVX2 EPYC ran g++
135 times for 363 s without this wrapper, 99 times for 258 s with it
(bench/results/2026-11-30-test-compiles.md). What the tests check is unchanged: every caller still
runs its own build step and finds its file where it asked for it.

A compile is one identical to an earlier one when its arguments (the output path left out) and the
contents of the files it names are the same; includes are the system's and torch's, the same for
the whole run. Only commands that write a `.so` or `.o` with `-o` are stored, and only when they
succeed; anything else (`--version`, preprocessing, precompiled headers, a failing source) runs the
real compiler alone.

`install(directory, real)` writes the wrapper as `directory/bin/<the real compiler's name>` (Inductor
tells gcc from clang by that name) and returns its path; the run then points `CXX` at it."""
from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REAL_VARIABLE, STORE_VARIABLE = "ASCENDTILE_TEST_CXX_REAL", "ASCENDTILE_TEST_CXX_STORE"
# the run's wrapper directory, in the environment: the workers and the processes they start find it
# there and use that wrapper instead of installing their own
DIR_VARIABLE = "ASCENDTILE_TEST_CXX_DIR"


def install(directory: Path, real: str) -> Path:
    """A wrapper of compiler `real` that stores its outputs under directory/store."""
    store, bin_dir = directory / "store", directory / "bin"
    store.mkdir(parents=True, exist_ok=True)
    bin_dir.mkdir(parents=True, exist_ok=True)
    wrapper = bin_dir / Path(real).name
    # -I -S: the standard library only, without the venv's site hooks (a quicker start: ~70 against
    # ~85 ms a compile on the AVX2 EPYC)
    wrapper.write_text(f'#!/bin/sh\n{REAL_VARIABLE}="{real}" {STORE_VARIABLE}="{store}" '
                       f'exec "{sys.executable}" -I -S "{Path(__file__).resolve()}" "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def stored_output(args: list[str]) -> int | None:
    """The index of the output path of a compile that writes one object or library with -o, else None."""
    outputs = [i + 1 for i, arg in enumerate(args[:-1]) if arg == "-o"]
    return outputs[0] if len(outputs) == 1 and args[outputs[0]].endswith((".so", ".o")) else None


def compile_key(args: list[str], output: int) -> str:
    """The key of the compile whose output path is args[output]."""
    digest = hashlib.sha256()
    for i, arg in enumerate(args):
        if i == output:
            continue
        # a source or object by its contents, wherever it lies; any other argument as it is
        digest.update(hashlib.sha256(Path(arg).read_bytes()).digest() if os.path.isfile(arg) else arg.encode())
        digest.update(b"\0")
    return digest.hexdigest()


def main(args: list[str]) -> int:
    real, store = os.environ[REAL_VARIABLE], Path(os.environ[STORE_VARIABLE])
    index = stored_output(args)
    if index is None:
        return subprocess.run([real, *args]).returncode
    key, output = compile_key(args, index), Path(args[index])
    stored = store / key
    # one build of a key at a time: a process asking for one that another is building (two
    # tensor-parallel ranks compiling the same graph) waits for it and copies it
    with open(store / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stored.is_file():
            shutil.copyfile(stored, output)
            return 0
        status = subprocess.run([real, *args]).returncode
        if status == 0:
            with tempfile.NamedTemporaryFile(dir=store, delete=False) as tmp:
                shutil.copyfile(output, tmp.name)
            os.replace(tmp.name, stored)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
