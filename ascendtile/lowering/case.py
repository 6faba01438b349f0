"""A lowering case: one kernel with concrete constexprs and argument types, as triton-ascend's
front end needs them to build the kernel's IR without launching it."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class LoweringCase:
    name: str
    kernel: Any  # a @triton.jit function
    arg_types: dict[str, str]  # every non-constexpr argument -> "*fp16", "*i32", "i32", "fp32", ...
    constexprs: dict[str, Any] = field(default_factory=dict)
    expect_mode: str = "aiv"  # "aiv" (vector cores) or "mix" (tl.dot on the cube core)


def signature(case: LoweringCase) -> dict[str, str]:
    """The compiler's signature of the case: every kernel argument -> its type, or "constexpr"."""
    types = {}
    for arg in case.kernel.arg_names:
        if arg in case.constexprs:
            types[arg] = "constexpr"
        elif arg in case.arg_types:
            types[arg] = case.arg_types[arg]
        else:
            raise ValueError(f"{case.name}: no type or constexpr value for kernel argument {arg!r}")
    return types


def signature_types(kernel: Any, dtype: str, constexprs: dict[str, Any] | None = None, **overrides: str) -> dict[str, str]:
    """A case's `arg_types` derived from the kernel's argument names: `*_ptr` arguments point to
    `dtype`, every other runtime argument is i32, except the `overrides` (e.g. table_ptr="*i32",
    scale="fp32"). Constexpr arguments (upper case, or named in `constexprs`) are skipped unless
    overridden (an upper-case runtime size such as a GEMM's M gets M="i32")."""
    unknown = set(overrides) - set(kernel.arg_names)
    if unknown:
        raise ValueError(f"overrides: {sorted(unknown)} are not arguments of {kernel.__name__}")
    constexprs = constexprs or {}
    types = {}
    for arg in kernel.arg_names:
        if arg in overrides:
            types[arg] = overrides[arg]
        elif not (arg in constexprs or arg.isupper()):
            types[arg] = f"*{dtype}" if arg.endswith("_ptr") else "i32"
    return types
