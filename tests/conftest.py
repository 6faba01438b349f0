import os
import shutil
import tempfile

# Kernels must be decorated in interpreter mode, so this is set before ascendkit is imported.
os.environ.setdefault("TRITON_INTERPRET", "1")

# Compiles made with the default cache_dir go to a fresh directory of this session, never to the
# user's ~/.cache/ascendkit (or a cache they point ASCENDKIT_CACHE_DIR at): a second run then
# compiles afresh again, and the user's cache is not filled by the suite. Set in os.environ, so the
# processes the tests spawn use it too. One directory per process: each pytest-xdist worker is its
# own session and gets its own, so whether a graph compiles or is read back never depends on which
# tests another worker happened to run first (the cost: workers do not share compiled graphs).
SESSION_CACHE_DIR = tempfile.mkdtemp(prefix="ascendkit-test-cache-")
os.environ["ASCENDKIT_CACHE_DIR"] = SESSION_CACHE_DIR

import pytest  # noqa: E402
import torch  # noqa: E402

import ascendkit  # noqa: E402,F401  (registers torch.ops.ascend.*)


def pytest_unconfigure(config):
    shutil.rmtree(SESSION_CACHE_DIR, ignore_errors=True)


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
