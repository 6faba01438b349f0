"""Lowering cases, one module per kernel family (named like its kernels/ module), each with a
`cases() -> list[LoweringCase]` over real model shapes (shape_grid.py). Every kernel family must
have one: `all_cases` refuses a family without cases, so no kernel can be left out of the gate."""
from __future__ import annotations

import importlib

from ascendtile.kernels import KERNEL_MODULES
from ascendtile.lowering.case import LoweringCase


def family_cases(family: str) -> list[LoweringCase]:
    try:
        module = importlib.import_module(f"ascendtile.lowering.cases.{family}")
    except ModuleNotFoundError as exc:
        if exc.name != f"ascendtile.lowering.cases.{family}":
            raise
        raise RuntimeError(f"kernel family {family!r} has no ascendtile/lowering/cases/{family}.py") from None
    found = module.cases()
    if not found:
        raise RuntimeError(f"lowering/cases/{family}.py produced no cases")
    return found


def check_families(families: list[str] | None) -> None:
    """ValueError naming the families that are not kernel families, if any."""
    unknown = set(families or ()) - set(KERNEL_MODULES)
    if unknown:
        raise ValueError(f"families: unknown kernel families {sorted(unknown)}; known: {sorted(KERNEL_MODULES)}")


def cases_of(target: str) -> list[LoweringCase]:
    """The cases "module:function" returns (the positive controls, say)."""
    module, _, function = target.partition(":")
    return getattr(importlib.import_module(module), function)()


def all_cases(families: list[str] | None = None) -> list[LoweringCase]:
    check_families(families)
    return [case for family in KERNEL_MODULES if not families or family in families for case in family_cases(family)]
