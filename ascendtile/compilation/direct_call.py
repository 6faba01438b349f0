"""The bytecode Dynamo compiles a function into, as a function of its own: calling it runs the
compiled graph with no cache lookup and no guard evaluation (vLLM's compilation wrapper dispatches
to its compiled code the same way). Only for a caller that knows which compiled entry its inputs
need: nothing checks them (CompiledModel's decode graph keys its entries by what their guards
differ in)."""
from __future__ import annotations

import contextlib
import types
from typing import Callable, Iterator

import torch


@contextlib.contextmanager
def capturing_bytecode(fn: Callable) -> Iterator[list[types.FunctionType]]:
    """Within the block: the list of the functions Dynamo compiles `fn` (a plain function; a
    bound method's __func__) into, one a compile, in order; each takes fn's arguments."""
    compiled: list[types.FunctionType] = []

    def hook(code: types.CodeType, new_code: types.CodeType) -> None:
        if code is fn.__code__:
            function = types.FunctionType(new_code, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
            function.__kwdefaults__ = fn.__kwdefaults__
            compiled.append(function)

    handle = torch._dynamo.convert_frame.register_bytecode_hook(hook)
    try:
        yield compiled
    finally:
        handle.remove()
