"""One helper that registers an `ascend::*` op with torch.library.

Every op is declared once, in its family's module ascendtile/ops/<family>.py, with its public
schema (the notation of the op contract table in the README's "Ops" section: `Tensor!` =
mutated) and a validator. Its implementations are found by the family vocabulary
(docs/architecture.md): the pure-torch reference is `<name>` in ascendtile/ops/reference/<family>.py,
the Triton launcher `<name>` in ascendtile/kernels/<family>.py. Dispatch:
  CPU          -> reference, or the Triton launcher when ASCENDTILE_KERNELS=triton (read per call;
                  needs TRITON_INTERPRET=1 before ascendtile is imported)
  PrivateUse1  -> Triton launcher (NPU via torch_npu; registered by key so it works before
                  torch_npu is imported), or the reference when ASCENDTILE_KERNELS=reference is set
  CUDA         -> the same as PrivateUse1
  Meta/fake    -> validate, then `fake` (default: nothing, for ops that only write their
                  `Tensor!` arguments)

`unchecked(name)` is the same op without its validator, for the model's hot loop (see there);
`trusted_calls()` drops the validators of the registered ops themselves for a compiled forward,
whose graph calls them through the dispatcher.
"""
from __future__ import annotations

import contextlib
import importlib
import os
import re
import sys
import threading
from dataclasses import dataclass
from typing import Callable

import torch

NAMESPACE = "ascend"
_LIB = torch.library.Library(NAMESPACE, "DEF")

# name -> public schema string (the op table's notation), for the README table and `ascendtile info`.
REGISTERED: dict[str, str] = {}


@dataclass(frozen=True)
class OpInfo:
    schema: str
    triton: str  # the launcher, "ascendtile.kernels.<family>:<function>"
    module: str  # the module that registered the op, "ascendtile.ops.<family>"


# name -> where the op is declared and which launcher it runs (tests/test_layout.py checks that
# the launcher resolves).
OP_INFO: dict[str, OpInfo] = {}

# name -> the op without its validator (unchecked()).
_UNCHECKED: dict[str, Callable] = {}

# trusted_calls() depth of this thread.
_trust = threading.local()


def kernel_path(default: str = "reference") -> str:
    """'triton' or 'reference': which implementation runs (read at call time). Unset, CPU tensors
    run the reference (`default`) and device tensors the launcher (default="triton"): a device
    runs the reference only when asked, to bisect a kernel bug or as the kernel tests' reference
    side on a GPU (tests/conftest.py)."""
    value = os.environ.get("ASCENDTILE_KERNELS", default)
    if value not in ("triton", "reference"):
        raise ValueError(f"ASCENDTILE_KERNELS must be 'triton' or 'reference', got {value!r}")
    return value


def torch_schema(public: str) -> str:
    """Turn the public `Tensor!` / `Tensor!?` into torch alias annotations `Tensor(a!)`, ..."""
    letters = iter("abcdefghijklmnopqrstuvwxyz")
    return re.sub(r"Tensor!(\??)", lambda m: f"Tensor({next(letters)}!){m.group(1)}", public)


def register_op(name: str, schema: str, *, validate: Callable[..., None], fake: Callable | None = None) -> Callable:
    """Define `torch.ops.ascend.<name>` from the calling module ascendtile/ops/<family>.py and
    return the op overload.

    validate(*args) raises ValueError/TypeError naming the bad argument; it runs before any
    implementation. The reference (ops/reference/<family>.py) and the launcher
    (kernels/<family>.py), both named `name`, take the op's arguments in schema order; the
    launcher is imported on first use, so importing ascendtile needs no triton.
    """
    module = sys._getframe(1).f_globals["__name__"]
    family = module.rpartition(".")[2]
    reference = getattr(importlib.import_module(f"ascendtile.ops.reference.{family}"), name)
    triton = f"ascendtile.kernels.{family}:{name}"
    launcher = _lazy(triton)
    if name in REGISTERED:
        raise RuntimeError(f"op ascend::{name} registered twice")
    _LIB.define(name + torch_schema(schema))

    def cpu_path(*args):
        return (launcher if kernel_path() == "triton" else reference)(*args)

    def device_path(*args):
        return (launcher if kernel_path(default="triton") == "triton" else reference)(*args)

    def cpu_impl(*args):
        if not getattr(_trust, "depth", 0):
            validate(*args)
        return cpu_path(*args)

    def device_impl(*args):
        if not getattr(_trust, "depth", 0):
            validate(*args)
        return device_path(*args)

    _LIB.impl(name, cpu_impl, "CPU")
    _LIB.impl(name, device_impl, "PrivateUse1")
    _LIB.impl(name, device_impl, "CUDA")
    shape_fn = fake or _writes_only

    def fake_impl(*args):
        validate(*args)  # bad inputs fail at trace time too, and mixed-device calls land here
        return shape_fn(*args)

    torch.library.register_fake(f"{NAMESPACE}::{name}", fake_impl, lib=_LIB)
    REGISTERED[name] = schema
    OP_INFO[name] = OpInfo(schema, triton, module)
    overload = getattr(torch.ops.ascend, name).default

    def unchecked_impl(*args):
        if torch.compiler.is_compiling():
            return overload(*args)  # traced graphs keep the custom op (and its fake impl)
        device = args[0].device.type
        if device == "cpu":
            return cpu_path(*args)
        return device_path(*args) if device in ("npu", "cuda") else overload(*args)

    _UNCHECKED[name] = unchecked_impl
    return overload


def unchecked(name: str) -> Callable:
    """`torch.ops.ascend.<name>` without its validator and, in eager mode, without the dispatcher:
    the reference or launcher called directly (~65 µs less per call on CPU, 17 of them the
    validator; a decode step makes ~180 such calls). Only for callers whose arguments are valid
    by construction: the model's layers, whose tensors come from their own weights and from a
    step whose AttentionMetadata was validated once (AttentionMetadata.validate). The registered
    op keeps validating every call for everyone else."""
    return _UNCHECKED[name]


@contextlib.contextmanager
def trusted_calls():
    """Within this context (this thread only) the registered ops run without their validators.
    For a compiled forward over a step whose AttentionMetadata was validated: its graph keeps the
    registered ops (Dynamo traces through unchecked() to them, and their fake impls validated every
    call at trace time), so without this each call of every later step would validate again
    (~8 ms per decode step of the hollow 30-layer model at level 2, and host reads of the index
    ranges). The same contract as unchecked(): only for arguments valid by construction."""
    _trust.depth = getattr(_trust, "depth", 0) + 1
    try:
        yield
    finally:
        _trust.depth -= 1


def _lazy(target: str) -> Callable:
    module_name, _, attr = target.partition(":")
    resolved: list[Callable] = []

    def call(*args):
        if not resolved:
            resolved.append(getattr(importlib.import_module(module_name), attr))
        return resolved[0](*args)

    return call


def _writes_only(*args) -> None:
    """Fake impl of ops whose only effect is writing their `Tensor!` arguments."""
    return None
