"""Shared checks every op test file uses: kernel vs reference on the same inputs, opcheck,
torch.compile(fullgraph=True), and bad-input expectations."""
from __future__ import annotations

import copy
import os
import re
from contextlib import contextmanager
from typing import Callable, Sequence

import pytest
import torch

from tolerances import assert_close


@contextmanager
def kernel_path(path: str):
    old = os.environ.get("ASCENDKIT_KERNELS")
    os.environ["ASCENDKIT_KERNELS"] = path
    try:
        yield
    finally:
        if old is None:
            del os.environ["ASCENDKIT_KERNELS"]
        else:
            os.environ["ASCENDKIT_KERNELS"] = old


def run_both(op: Callable, args: Sequence, mutated: Sequence[int], **tol) -> None:
    """Run `op` on deep copies of `args` via the reference and via the Triton kernel (under the
    interpreter) and compare the mutated arguments (by position) or the returned tensor."""
    ref_args, tri_args = copy.deepcopy(list(args)), copy.deepcopy(list(args))
    with kernel_path("reference"):
        ref_out = op(*ref_args)
    with kernel_path("triton"):
        tri_out = op(*tri_args)
    if ref_out is not None:
        assert_close(tri_out, ref_out, **tol)
    for i in mutated:
        assert_close(tri_args[i], ref_args[i], **tol)


def opcheck(op, args: Sequence) -> None:
    torch.library.opcheck(op, tuple(args))


def compiles(fn: Callable, *args) -> None:
    """fn traces under torch.compile(fullgraph=True) and gives eager's result."""
    eager_args, compiled_args = copy.deepcopy(list(args)), copy.deepcopy(list(args))
    expected = fn(*eager_args)
    torch._dynamo.reset()
    got = torch.compile(fn, fullgraph=True, backend="aot_eager")(*compiled_args)
    torch.testing.assert_close(got, expected)


def raises_naming(exc: type, arg_name: str, op: Callable, *args) -> None:
    """op(*args) raises exc with a message starting with the argument's name."""
    with pytest.raises(exc, match=rf"^{re.escape(arg_name)}\b"):
        op(*args)
