"""CPU: replace `ascend` op calls in a Dynamo graph by their pure-torch references, so Inductor
sees (and fuses) the elementwise work inside them instead of calling opaque ops (vLLM's
forward_native idea).

Only families whose references have no data-dependent control flow are decomposed; rope,
kv_cache and the attention references read index ranges on the host (`int(t.max())`), so they
stay opaque calls. The ops' validators already ran at trace time (each fake impl validates).
"""
from __future__ import annotations

import importlib
from typing import Callable

from torch import fx

from ascendtile.compilation.passes.graph import ascend_op
from ascendtile.ops._registry import OP_INFO

DECOMPOSED_FAMILIES = ("norm", "activation", "quant", "fused_quant", "scaled_mm")


def reference_of(name: str) -> Callable | None:
    """The reference implementation of op `name` if its family is decomposed, else None."""
    family = OP_INFO[name].module.rpartition(".")[2]
    if family not in DECOMPOSED_FAMILIES:
        return None
    return getattr(importlib.import_module(f"ascendtile.ops.reference.{family}"), name)


def decompose_to_references(gm: fx.GraphModule) -> int:
    """Retarget decomposable op calls in place; returns how many."""
    count = 0
    for node in gm.graph.nodes:
        name = ascend_op(node)
        reference = reference_of(name) if name else None
        if reference is not None:
            node.target = reference
            count += 1
    gm.recompile()
    return count
