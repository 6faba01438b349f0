"""Shared checks the op test files use: kernel vs reference on the same inputs (tests/kernels/),
the op contract tests every family generates from its sample inputs (`op_contract_tests`, in
tests/ops/), torch.compile(fullgraph=True), and bad-input expectations."""
from __future__ import annotations

import copy
import os
import re
from contextlib import contextmanager
from typing import Callable, Mapping, Sequence

import pytest
import torch

from tolerances import assert_close


@contextmanager
def kernel_path(path: str):
    old = os.environ.get("ASCENDTILE_KERNELS")
    os.environ["ASCENDTILE_KERNELS"] = path
    try:
        yield
    finally:
        if old is None:
            del os.environ["ASCENDTILE_KERNELS"]
        else:
            os.environ["ASCENDTILE_KERNELS"] = old


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


def seeded_generator(seed: int) -> torch.Generator:
    """A generator on the tests' device (torch's default: a GPU under ASCENDTILE_TEST_DEVICE)."""
    return torch.Generator(torch.get_default_device()).manual_seed(seed)


def opcheck(op, args: Sequence) -> None:
    torch.library.opcheck(op, tuple(args))


def compiles(fn: Callable, *args) -> None:
    """fn traces under torch.compile(fullgraph=True) and gives eager's result."""
    eager_args, compiled_args = copy.deepcopy(list(args)), copy.deepcopy(list(args))
    expected = fn(*eager_args)
    torch._dynamo.reset()
    got = torch.compile(fn, fullgraph=True, backend="aot_eager")(*compiled_args)
    torch.testing.assert_close(got, expected)


def op_contract_tests(samples: Mapping[str, Callable[[], Sequence]]) -> tuple[Callable, Callable]:
    """The opcheck and torch.compile(fullgraph=True) tests of a family's ops, on both kernel paths
    (reference, and Triton under the interpreter). `samples` maps "op" or "op:variant" to a
    builder of that op's arguments in schema order. In tests/ops/test_<family>.py:

        test_opcheck, test_compile = op_contract_tests({"rms_norm": lambda: [...], ...})

    The compile test runs the raw op in a compiled function that returns what the op writes (its
    `Tensor!` arguments) or returns, and compares it with eager."""
    def op_of(sample: str):
        return getattr(torch.ops.ascend, sample.partition(":")[0]).default

    @pytest.mark.parametrize("path", ["reference", "triton"])
    @pytest.mark.parametrize("sample", list(samples))
    def test_opcheck(sample, path):
        with kernel_path(path):
            opcheck(op_of(sample), samples[sample]())

    @pytest.mark.parametrize("path", ["reference", "triton"])
    @pytest.mark.parametrize("sample", list(samples))
    def test_compile(sample, path):
        op = op_of(sample)
        written = [i for i, arg in enumerate(op._schema.arguments) if arg.alias_info and arg.alias_info.is_write]

        def call(*args):
            result = op(*args)
            return result if result is not None else [args[i] for i in written if i < len(args) and args[i] is not None]

        with kernel_path(path):
            compiles(call, *samples[sample]())

    return test_opcheck, test_compile


def raises_naming(exc: type, arg_name: str, op: Callable, *args) -> None:
    """op(*args) raises exc with a message starting with the argument's name."""
    with pytest.raises(exc, match=rf"^{re.escape(arg_name)}\b"):
        op(*args)
