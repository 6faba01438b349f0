"""Under the Triton 3.2 interpreter, triton.language is patched once per set of language modules
(ascendtile/kernels/_interpreter.py), not again at every launch and every @triton.jit helper call;
an import makes the next launch patch again. The kernels' results are the kernel tests'."""
import os
import sys
import types

import pytest
import torch

from opchecks import kernel_path

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="the interpreter is off")


def _rms_norm() -> None:
    """rms_norm's kernel calls _tile_io's @triton.jit helpers for every tile."""
    x = torch.randn(9, 576)
    with kernel_path("triton"):
        torch.ops.ascend.rms_norm(torch.empty_like(x), x, torch.randn(576), 1e-6)


def test_language_is_patched_once_and_again_after_an_import(monkeypatch):
    from triton.runtime import interpreter

    _rms_norm()  # imports the kernels, which install the patch; the first launch patches
    assert getattr(interpreter._patch_lang, "patches_once", False)
    walks = []  # one per module walked for builtins to replace
    walk = interpreter._patch_builtin
    monkeypatch.setattr(interpreter, "_patch_builtin", lambda pkg, builder: (walks.append(pkg), walk(pkg, builder)))
    _rms_norm()
    assert walks == []
    monkeypatch.setitem(sys.modules, "ascendtile_test_imported", types.ModuleType("ascendtile_test_imported"))
    _rms_norm()
    assert len(walks) >= 3  # triton.language, its tensor and math modules, walked again

