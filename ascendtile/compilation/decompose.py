"""CPU: replace `ascend` op calls in a Dynamo graph by their pure-torch references, so Inductor
sees (and fuses) the elementwise work inside them instead of calling opaque ops (vLLM's
forward_native idea).

Only families whose references have no data-dependent control flow are decomposed; rope,
kv_cache and the attention references read index ranges on the host (`int(t.max())`), so they
stay opaque calls in a graph that serves every step. A decode graph (CompiledModel's, for steps
where every sequence brings one token) also takes their traceable forms, which read nothing on
the host: rope over positions [T], the KV write into float caches and unified_attention over
float caches, so no `ascend` op is left in a decode step. The general graph keeps them opaque: its
attention would need the mixed-batch masks, and the traceable forms double its compile time.
The ops' validators already ran at trace time (each fake impl validates).
"""
from __future__ import annotations

import importlib
from typing import Callable

from torch import fx

from ascendtile.compilation.passes.graph import ascend_op, example
from ascendtile.ops._registry import OP_INFO
from ascendtile.ops.reference.attention_unified import unified_attention_decode_traceable
from ascendtile.ops.reference.kv_cache import reshape_and_cache_flash_traceable
from ascendtile.ops.reference.rope import rotary_embedding_traceable

DECOMPOSED_FAMILIES = ("norm", "activation", "quant", "fused_quant", "scaled_mm")

# op -> (its traceable form, the schema argument that must be "auto"); for decode graphs only.
DECODE_FORMS = {
    "rotary_embedding": (rotary_embedding_traceable, None),
    "reshape_and_cache_flash": (reshape_and_cache_flash_traceable, "kv_cache_dtype"),
    "unified_attention": (unified_attention_decode_traceable, "kv_cache_dtype"),
}


def reference_of(name: str) -> Callable | None:
    """The reference implementation of op `name` if its family is decomposed, else None."""
    family = OP_INFO[name].module.rpartition(".")[2]
    if family not in DECOMPOSED_FAMILIES:
        return None
    return getattr(importlib.import_module(f"ascendtile.ops.reference.{family}"), name)


def decode_form_of(node: fx.Node, name: str) -> Callable | None:
    """The traceable form of op call `node` in a decode graph, or None where it has none: an int8
    KV cache, positions other than [T]."""
    form, dtype_arg = DECODE_FORMS.get(name, (None, None))
    if form is None:
        return None
    arguments = node.target._schema.arguments
    if dtype_arg is not None:
        index = next(i for i, a in enumerate(arguments) if a.name == dtype_arg)
        value = node.args[index] if index < len(node.args) else node.kwargs.get(dtype_arg, arguments[index].default_value)
        if value != "auto":
            return None
    if name == "rotary_embedding":
        positions = example(node.args[0])
        if positions is None or positions.dim() != 1:
            return None
    return form


def decompose_to_references(gm: fx.GraphModule, decode: bool = False) -> int:
    """Retarget decomposable op calls in place; returns how many. decode: gm is a decode graph
    (every sequence one new token), whose rope, KV write and attention take their traceable forms."""
    count = 0
    for node in gm.graph.nodes:
        name = ascend_op(node)
        reference = reference_of(name) if name else None
        if reference is None and name and decode:
            reference = decode_form_of(node, name)
        if reference is not None:
            node.target = reference
            count += 1
    gm.recompile()
    return count
