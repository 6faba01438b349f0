"""Where vLLM lives for the tests: a venv of its own (`make install-vllm` builds .venv-vllm at the
repository root; ASCENDTILE_VLLM_VENV points elsewhere), because vLLM's CPU wheel pulls upstream
triton, which must never sit beside triton-ascend in the test env."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def vllm_venv() -> Path:
    """The vLLM venv; a test that needs it fails (never skips) when it is missing: CI runs them."""
    venv = Path(os.environ.get("ASCENDTILE_VLLM_VENV", REPO / ".venv-vllm"))
    if not (venv / "bin" / "python").is_file():
        pytest.fail(f"no vLLM venv at {venv}: run `make install-vllm` (or set ASCENDTILE_VLLM_VENV)", pytrace=False)
    return venv
