"""The ops' C++ bodies (ascendtile/cpu/dispatch.py): registered for the dispatch keys the graphs'
calls take, loaded once per process, and the table and row-bound setters refusing what they cannot
serve. What each body computes and how it fails on bad operands: the op's own test file
(test_decode_attention.py, test_unified_attention.py, test_linear.py, test_rotary_embedding.py)."""
import re
from pathlib import Path

import pytest
import torch

from ascendtile.compilation.config import default_cache_dir
from ascendtile.cpu import build, dispatch
from ascendtile.cpu import decode_attention as cda
from ascendtile.cpu import linear as cl
from ascendtile.model.layers import linear as model_linear


@pytest.fixture(scope="module", autouse=True)
def kernels():
    assert cl.load(default_cache_dir(), [torch.float32]) and cda.load(default_cache_dir(), [(torch.float32, 64)])


@pytest.mark.parametrize("op, key", [("cpu_decode_attention", "CPU"), ("cpu_unified_attention", "CPU"),
                                     ("cpu_linear", "CPU"), ("cpu_linear", "MkldnnCPU"), ("cpu_rotary_embedding", "CPU")])
def test_the_bodies_are_registered_in_cpp(op, key):
    """The dispatcher holds a kernel for the key itself, beside the Python fallback (which is
    CompositeExplicitAutograd; an op with only that has none for the key)."""
    assert torch._C._dispatch_has_kernel_for_dispatch_key(f"ascendtile::{op}", key)
    assert torch._C._dispatch_has_kernel_for_dispatch_key(f"ascendtile::{op}", "CompositeExplicitAutograd")
    assert not torch._C._dispatch_has_kernel_for_dispatch_key("ascendtile::onednn_linear", key)


def test_a_packed_weight_reaches_the_cpp_body(monkeypatch):
    """A oneDNN-packed weight makes the call MkldnnCPU: the C++ body takes it, and its rows past the
    bound go to onednn_linear, which on an AMD CPU multiplies with the packed copy."""
    monkeypatch.setattr(model_linear, "cpu_vendor", lambda: "AuthenticAMD")
    x, weight = torch.randn(cl.MAX_ROWS + 1, 64), torch.randn(32, 64)
    packed = torch.ops.mkldnn._reorder_linear_weight(weight, 8)
    calls = cl.calls
    out = torch.ops.ascendtile.cpu_linear(x, weight, packed, None)
    assert cl.calls == calls
    assert torch.equal(out, torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], ""))
    torch.ops.ascendtile.cpu_linear(x[:1], weight, packed, None)
    assert cl.calls == calls + 1


def test_loaded_once_per_process_and_copied_into_another_cache_dir(tmp_path):
    """Another cache_dir gets the library already loaded: nothing is built, the tables stay, and
    that cache_dir now holds the same file, where a process starting with it finds it."""
    runs, library = build.compiler_runs, dispatch.library(default_cache_dir())
    assert dispatch.library(str(tmp_path)) is library and build.compiler_runs == runs
    copies = list((tmp_path / "cpu").iterdir())
    assert [p.name for p in copies] == [Path(library._name).name]
    assert copies[0].read_bytes() == Path(library._name).read_bytes()
    assert copies[0] == build.library_path("dispatch", dispatch._source(), str(tmp_path), dispatch.torch_flags())
    before = copies[0].stat().st_mtime_ns
    assert dispatch.library(str(tmp_path)) is library and copies[0].stat().st_mtime_ns == before  # kept, not recopied
    (tmp_path / "file").write_text("")  # a cache_dir that cannot be made: a warning, the library stays loaded
    with pytest.warns(RuntimeWarning, match=f"could not copy dispatch-.*into {re.escape(str(tmp_path / 'file' / 'cpu'))}"):
        assert dispatch.library(str(tmp_path / "file")) is library


def test_setters_refuse_what_they_cannot_serve():
    with pytest.raises(ValueError, match="^op: no C.. body for 'onednn_linear'"):
        dispatch.register("onednn_linear", (torch.float32,), None)
    with pytest.raises(ValueError, match=r"^variant: no table entry for \(torch.float64,\)"):
        dispatch.register("cpu_linear", (torch.float64,), None)
    with pytest.raises(ValueError, match=r"^variant: no table entry for \(torch.float32, 512\)"):
        dispatch.register("cpu_decode_attention", (torch.float32, 512), None)
    with pytest.raises(ValueError, match="^rows: at most the kernel's 64, got 65"):
        dispatch.set_linear_max_rows(65)
    with pytest.raises(ValueError, match="^wide_rows: at most the kernel's 64, got 65"):
        dispatch.set_linear_kernels(65, False)
    dispatch.set_linear_max_rows(0)  # every product goes to aten
    try:
        calls = cl.calls
        x, weight = torch.randn(1, 16), torch.randn(4, 16)
        assert torch.equal(torch.ops.ascendtile.cpu_linear(x, weight, None, None), torch.nn.functional.linear(x, weight))
        assert cl.calls == calls
    finally:
        dispatch.set_linear_max_rows(cl.MAX_ROWS)


def test_without_the_library_the_ops_are_not_loaded(tmp_path, monkeypatch):
    """Where the library does not build (a compiler that fails, in a process that has not loaded
    it), an op's load says False, so the graphs keep the reference path."""
    monkeypatch.setattr(dispatch, "_library", None)
    with pytest.raises(RuntimeError, match="^ascendtile.cpu.dispatch: the library is not loaded"):
        dispatch.set_linear_max_rows(1)
    monkeypatch.setenv("CXX", "false")
    with pytest.warns(RuntimeWarning, match="building dispatch failed"):
        assert not cl.load(str(tmp_path), [torch.float32])
    assert dispatch.calls("cpu_linear") == 0  # no library: no counter


def test_the_python_fallback_says_nothing_is_loaded():
    with pytest.raises(RuntimeError, match=r"^cpu_linear: no kernel is loaded in this process \(ascendtile.cpu.linear.load\)"):
        dispatch.not_loaded("cpu_linear")(torch.randn(1, 16), torch.randn(4, 16), None, None)
    with pytest.raises(AttributeError, match="^module 'ascendtile.cpu.linear' has no attribute 'call'$"):
        cl.call
