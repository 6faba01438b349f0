"""FX graph helpers shared by the passes, for Dynamo-level graphs: there the `ascend` ops appear
as calls of their OpOverloads with the `Tensor!` arguments written in place (not functionalized),
so a tensor's value at a node is set by the last node before it that writes it."""
from __future__ import annotations

import torch
from torch import fx

# Nodes that read only a tensor's metadata (shape, dtype, device): they may sit between a write and
# a read without observing the value.
SHAPE_READS = {torch.ops.aten.sym_size.int, torch.empty_like}


def ascend_op(node: fx.Node) -> str | None:
    """The op name if node calls torch.ops.ascend.<name>.default, else None."""
    target = node.target
    if node.op == "call_function" and isinstance(target, torch._ops.OpOverload) and target.namespace == "ascend":
        return target._schema.name.partition("::")[2]
    return None


def written_args(node: fx.Node) -> list[fx.Node]:
    """The node arguments an op call writes (its schema's `Tensor(a!)` arguments)."""
    schema = node.target._schema
    return [arg for arg, spec in zip(node.args, schema.arguments)
            if isinstance(arg, fx.Node) and spec.alias_info is not None and spec.alias_info.is_write]


def last_writer(value: fx.Node, before: fx.Node) -> fx.Node | None:
    """The last `ascend` op call before `before` that writes `value`."""
    order = {n: i for i, n in enumerate(before.graph.nodes)}
    writers = [u for u in value.users if order[u] < order[before] and ascend_op(u) and value in written_args(u)]
    return max(writers, key=order.__getitem__, default=None)


def value_readers_between(value: fx.Node, first: fx.Node, last: fx.Node, *, after: bool = False) -> list[fx.Node]:
    """Users of `value` strictly between first and last (or, with after=True, also after last),
    other than metadata reads."""
    order = {n: i for i, n in enumerate(first.graph.nodes)}
    lo, hi = order[first], order[last]
    return [u for u in value.users
            if u.target not in SHAPE_READS and lo < order[u] and (order[u] < hi or (after and order[u] > hi))]


def example(node: fx.Node) -> torch.Tensor | None:
    """The fake tensor Dynamo recorded for node's value (None if it recorded none)."""
    value = node.meta.get("example_value")
    return value if isinstance(value, torch.Tensor) else None
