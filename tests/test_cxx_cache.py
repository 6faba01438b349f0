"""The test run's C++ compiler wrapper (tests/cxx_cache.py), over a stand-in compiler that counts its
runs: an identical compile elsewhere is a copy, not a run, also one asked for while the first
builds; other sources, other flags, failures and commands that write no object or library run the
compiler every time. And this run compiles through it."""
import os
import subprocess
from pathlib import Path

import pytest

import cxx_cache

# copies its first argument to the -o path; fails on a source holding FAIL; counts every run; takes
# a second with SLOW set
STAND_IN = """#!/bin/sh
echo run >> "{count}"
[ -n "$SLOW" ] && sleep 1
[ "$1" = --version ] && {{ echo "stand-in 1.0"; exit 0; }}
grep -q FAIL "$1" && exit 1
out=""; prev=""
for a in "$@"; do [ "$prev" = -o ] && out=$a; prev=$a; done
cp "$1" "$out"
"""


@pytest.fixture
def wrapper(tmp_path) -> tuple[Path, Path]:
    count = tmp_path / "count"
    real = tmp_path / "real" / "c++"
    real.parent.mkdir()
    real.write_text(STAND_IN.format(count=count))
    real.chmod(0o755)
    return cxx_cache.install(tmp_path / "wrapper", str(real)), count


def compile_command(wrapper: Path, where: Path, source: str, *flags: str, output: str = "lib.so") -> list[str]:
    """The wrapper's command compiling `source`, written to where/k.cpp, into where/output."""
    where.mkdir(parents=True, exist_ok=True)
    (where / "k.cpp").write_text(source)
    return [str(wrapper), str(where / "k.cpp"), *flags, "-o", str(where / output)]


def compile_in(wrapper: Path, where: Path, source: str, *flags: str, output: str = "lib.so") -> int:
    return subprocess.run(compile_command(wrapper, where, source, *flags, output=output)).returncode


def runs(count: Path) -> int:
    return len(count.read_text().splitlines()) if count.exists() else 0


def test_an_identical_compile_elsewhere_is_a_copy(wrapper, tmp_path):
    cxx, count = wrapper
    assert cxx.name == "c++"  # the real compiler's name, which Inductor reads gcc or clang from
    assert compile_in(cxx, tmp_path / "a", "int f();", "-O3") == 0 and runs(count) == 1
    assert compile_in(cxx, tmp_path / "b", "int f();", "-O3") == 0 and runs(count) == 1
    assert (tmp_path / "b" / "lib.so").read_text() == "int f();"
    assert compile_in(cxx, tmp_path / "c", "int g();", "-O3") == 0 and runs(count) == 2  # another source
    assert compile_in(cxx, tmp_path / "d", "int f();", "-O2") == 0 and runs(count) == 3  # other flags
    assert (tmp_path / "d" / "lib.so").read_text() == "int f();"


def test_a_compile_asked_for_while_it_builds_waits_and_copies(wrapper, tmp_path):
    cxx, count = wrapper
    started = [subprocess.Popen(compile_command(cxx, tmp_path / where, "int f();"), env={**os.environ, "SLOW": "1"})
               for where in ("a", "b")]
    assert [p.wait() for p in started] == [0, 0] and runs(count) == 1
    assert (tmp_path / "a" / "lib.so").read_text() == (tmp_path / "b" / "lib.so").read_text() == "int f();"


def test_failures_and_other_commands_always_run(wrapper, tmp_path):
    cxx, count = wrapper
    assert compile_in(cxx, tmp_path / "a", "FAIL") == 1 and compile_in(cxx, tmp_path / "b", "FAIL") == 1
    assert runs(count) == 2 and not (tmp_path / "b" / "lib.so").exists()
    assert compile_in(cxx, tmp_path / "c", "int f();", output="k.i") == 0  # no object or library: not stored
    assert compile_in(cxx, tmp_path / "d", "int f();", output="k.i") == 0 and runs(count) == 4
    version = subprocess.run([str(cxx), "--version"], capture_output=True, text=True)
    assert version.stdout == "stand-in 1.0\n" and runs(count) == 5


def test_this_run_compiles_through_the_wrapper():
    if os.environ.get(cxx_cache.DIR_VARIABLE) is None:
        pytest.skip("no C++ compiler here: nothing to wrap")
    assert Path(os.environ["CXX"]).parent == Path(os.environ[cxx_cache.DIR_VARIABLE]) / "bin"
