import os

# Kernels must be decorated in interpreter mode, so this is set before ascendkit is imported.
os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

import ascendkit  # noqa: E402,F401  (registers torch.ops.ascend.*)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture
def triton_path(monkeypatch):
    """Route CPU tensors to the Triton kernels (under the interpreter) for this test."""
    monkeypatch.setenv("ASCENDKIT_KERNELS", "triton")


@pytest.fixture
def reference_path(monkeypatch):
    monkeypatch.setenv("ASCENDKIT_KERNELS", "reference")
