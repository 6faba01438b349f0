"""The wheel built from this checkout holds every module of the package and nothing else of the
tree (no tests, bench or docs), and runs installed by itself: `ascendtile info` and a 4-token
greedy `generate` on the embedded model, through the wheel's console script, from a directory
outside the checkout, importing the installed copy (not this checkout's)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import ascendtile

REPO = Path(ascendtile.__file__).resolve().parents[1]

pytestmark = pytest.mark.slow  # a wheel build, then a model load in a fresh process


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel, built from a copy of the checkout (setuptools writes build/ and egg-info next to
    the sources it builds). The venvs are left out: .venv-vllm alone is ~3.4 GB."""
    source = tmp_path_factory.mktemp("source") / "tree"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(".venv*", ".git", "build", "*.egg-info", "__pycache__",
                                                                ".pytest_cache", ".hypothesis", ".benchmarks"))
    out = tmp_path_factory.mktemp("wheel")
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                            "-w", str(out), str(source)], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    [path] = out.glob("ascendtile-*.whl")
    return path


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    target = tmp_path_factory.mktemp("site")
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--target", str(target),
                           str(wheel)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return target


def _run_installed(installed: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(installed)}  # the installed copy only, not this checkout
    return subprocess.run([str(installed / "bin" / "ascendtile"), *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


def test_wheel_holds_the_package_and_nothing_else(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    modules = {p.relative_to(REPO).as_posix() for p in (REPO / "ascendtile").rglob("*.py")}
    assert len(modules) > 100 and modules <= names, sorted(modules - names)[:5]
    top = {n.split("/")[0] for n in names}
    assert {t for t in top if not t.endswith(".dist-info")} == {"ascendtile"} and len(top) == 2, top
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "Name: ascendtile" in metadata and "License-Expression: Apache-2.0" in metadata
    assert "Provides-Extra: gemma3" in metadata and "Requires-Python: >=3.10" in metadata
    entry_points = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "ascendtile = ascendtile.cli:main" in entry_points


def test_installed_wheel_runs_info_and_a_greedy_generate_outside_the_checkout(installed, tmp_path):
    where = subprocess.run([sys.executable, "-c", "import ascendtile; print(ascendtile.__file__)"], cwd=tmp_path,
                           env={**os.environ, "PYTHONPATH": str(installed)}, capture_output=True, text=True)
    assert Path(where.stdout.strip()).is_relative_to(installed), where.stdout + where.stderr
    info = _run_installed(installed, tmp_path, "info")
    assert info.returncode == 0, info.stderr[-3000:]
    assert "torch" in info.stdout
    generated = _run_installed(installed, tmp_path, "generate", "--model", "default", "--prompt",
                               "The capital of Germany is", "--max-tokens", "4", "--temperature", "0")
    assert generated.returncode == 0, generated.stderr[-3000:]
    assert "### The capital of Germany is" in generated.stdout
    assert "[4 tokens, finish_reason=length]" in generated.stdout
