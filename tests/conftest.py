import os
import shutil
import tempfile
from pathlib import Path

import cxx_cache

# ASCENDTILE_TEST_DEVICE=cuda (`make test-cuda`) makes an NVIDIA GPU torch's default device: the
# tests' tensors live there and the kernels run compiled by upstream triton, against the references
# run on the same GPU (ASCENDTILE_KERNELS=reference, ops/_registry.py). Its scope is the kernel and
# op tests (tests/kernels, tests/ops); the rest of the suite is written for CPU tensors.
TEST_DEVICE = os.environ.get("ASCENDTILE_TEST_DEVICE", "cpu")
# On CPU kernels must be decorated in interpreter mode, so this is set before ascendtile is imported.
os.environ.setdefault("TRITON_INTERPRET", "1" if TEST_DEVICE == "cpu" else "0")

# Compiles made with the default cache_dir go to a fresh directory of this session, never to the
# user's ~/.cache/ascendtile (or a cache they point ASCENDTILE_CACHE_DIR at): a second run then
# compiles afresh again, and the user's cache is not filled by the suite. Set in os.environ, so the
# processes the tests spawn use it too. One directory per process: each pytest-xdist worker is its
# own session and gets its own, so whether a graph compiles or is read back never depends on which
# tests another worker happened to run first (the cost: workers do not share compiled graphs).
SESSION_CACHE_DIR = tempfile.mkdtemp(prefix="ascendtile-test-cache-")
os.environ["ASCENDTILE_CACHE_DIR"] = SESSION_CACHE_DIR

# Those per-process cache_dirs, and the tests' own empty ones, would each build their C++ (Inductor's
# kernels, our CPU libraries) again: the whole run, pytest-xdist's workers and the processes the
# tests start, compiles through one wrapper that builds each distinct compile once (cxx_cache.py).
# The process that installs it (the controller under xdist) removes it at the end.
_REAL_CXX = shutil.which(os.environ.get("CXX", "g++"))
CXX_WRAPPER_DIR = None
if cxx_cache.DIR_VARIABLE not in os.environ and _REAL_CXX:
    CXX_WRAPPER_DIR = tempfile.mkdtemp(prefix="ascendtile-test-cxx-")
    os.environ["CXX"] = str(cxx_cache.install(Path(CXX_WRAPPER_DIR), _REAL_CXX))
    os.environ[cxx_cache.DIR_VARIABLE] = CXX_WRAPPER_DIR

import pytest  # noqa: E402
import torch  # noqa: E402

import ascendtile  # noqa: E402,F401  (registers torch.ops.ascend.*)

if TEST_DEVICE != "cpu":
    torch.set_default_device(TEST_DEVICE)

pytest_plugins = ["embedded", "vllm_kernels"]  # session fixtures: embedded models and HF references; vLLM's CPU kernels

# pytest-xdist workers share the machine's cores: each takes its share of torch's intra-op threads,
# so two workers on two cores do not run four threads that wait on each other.
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))


def pytest_unconfigure(config):
    shutil.rmtree(SESSION_CACHE_DIR, ignore_errors=True)
    if CXX_WRAPPER_DIR:
        shutil.rmtree(CXX_WRAPPER_DIR, ignore_errors=True)


def pytest_runtest_setup(item):
    """Under `--dist loadgroup` a test marked `xdist_group` runs on its group's one worker only if
    pytest-xdist tagged its id with the group. Untagged, the group's module and session fixtures
    (the embedded models, the Ascend gate) would be built on every worker: fail instead of paying
    for that silently."""
    if getattr(item.config.option, "loadgroup", False) and item.get_closest_marker("xdist_group") and "@" not in item.nodeid:
        pytest.fail("--dist loadgroup: pytest-xdist did not tag this test with its xdist_group, so the group is "
                    "spread over the workers (pytest 9 ignores xdist 3.8's tags: pyproject pins pytest<9)", pytrace=False)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture
def triton_path(monkeypatch):
    """Route CPU tensors to the Triton kernels (under the interpreter) for this test."""
    monkeypatch.setenv("ASCENDTILE_KERNELS", "triton")


@pytest.fixture
def values_checked(monkeypatch):
    """The validators read values back (index ranges, lengths, temperatures) from CPU tensors only,
    and from a device's with ASCENDTILE_CHECK_INDICES=1 (ops/_indices.py): set here on a GPU, so a
    bad-input test expects the same errors on both."""
    if TEST_DEVICE != "cpu":
        monkeypatch.setenv("ASCENDTILE_CHECK_INDICES", "1")


@pytest.fixture
def reference_path(monkeypatch):
    monkeypatch.setenv("ASCENDTILE_KERNELS", "reference")
