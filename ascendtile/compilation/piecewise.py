"""Level 3's split (vLLM's piecewise backend): the Dynamo graph, after the fusion passes, cut at
every call of a splitting op (attention) into [piece, splitting op, piece, ..., piece] with
torch.fx's split_module. The pieces are compiled (and on devices captured per bucket) one by one;
the splitting ops run eagerly between them, in the graph's order.

A KV-cache write that fills the cache a splitting op reads joins that op's eager part (as in
vLLM, whose attention op writes the cache itself): the write is the one side effect a piece would
otherwise have that depends on the step's slot mapping, so without it a piece's inputs are only
the token rows, ints derived from the token count, and tensors that never move (weights, caches).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import sympy
import torch
from torch import fx
from torch.fx.passes.split_module import split_module

from ascendtile.compilation.passes.graph import ascend_op, example, value_readers_between, written_args

KV_WRITES = ("reshape_and_cache_flash", "concat_and_cache_mla")


@dataclass
class SplitGraph:
    """module: the top-level graph, calling its submodules in the original order. pieces: the
    names of the compiled submodules (their fx graphs stay in module._modules); splitting: the
    names of the eager ones, each holding one splitting op (and the KV writes that joined it)."""

    module: fx.GraphModule
    pieces: list[str]
    splitting: list[str]

    def submodule(self, name: str) -> fx.GraphModule:
        """The fx graph of submodule `name` (a piece's, even after its compiled runner is installed)."""
        return self.module._modules[name]


def split_graph(gm: fx.GraphModule, splitting_ops: Sequence[str]) -> SplitGraph:
    """Split gm at every call of an op in splitting_ops ("ascend::<op>" names)."""
    names = {op.partition("::")[2] for op in splitting_ops}
    joined = _join_kv_writes(gm.graph, names)
    partition, index = {}, 0
    for node in gm.graph.nodes:
        # pieces get even ids, splitting ops odd ones: a joined KV write goes with the next splitting op
        if node in joined or ascend_op(node) in names:
            partition[node] = index + 1
            index += 2 if ascend_op(node) in names else 0
        else:
            partition[node] = index
    module = split_module(gm, None, partition.__getitem__, keep_original_order=True, tuple_return=True)
    submodules = [n.target for n in module.graph.nodes if n.op == "call_module"]
    pieces = [name for name in submodules if int(name.rpartition("_")[2]) % 2 == 0]
    return SplitGraph(module, pieces, [name for name in submodules if name not in pieces])


def _join_kv_writes(graph: fx.Graph, names: set[str]) -> set[fx.Node]:
    """Move each KV write to just before the next splitting op that reads a cache it writes, when
    nothing between them reads or writes those caches; returns the moved writes."""
    joined, pending = set(), []
    for node in list(graph.nodes):
        if ascend_op(node) in KV_WRITES:
            pending.append(node)
        elif ascend_op(node) in names:
            for write in pending:
                caches = written_args(write)
                reads_cache = any(cache in node.args for cache in caches)
                if reads_cache and not any(set(value_readers_between(c, write, node)) - {node} for c in caches):
                    node.prepend(write)
                    joined.add(write)
            pending = []
    return joined


def token_symbol(gm: fx.GraphModule) -> sympy.Symbol | None:
    """The symbol of the token count: the first dim of the forward's output (hidden [T, H]);
    None if the trace made it a constant."""
    outputs = gm.graph.output_node().args[0]
    value = example(outputs[0] if isinstance(outputs, (tuple, list)) else outputs)
    if value is None or not isinstance(value.shape[0], torch.SymInt):
        return None
    expr = value.shape[0].node.expr
    return expr if isinstance(expr, sympy.Symbol) else None


def example_inputs(piece: fx.GraphModule) -> list:
    """The fake values Dynamo recorded for the piece's inputs (symbolic sizes): what its compiler
    traces with."""
    return [node.meta["example_value"] for node in piece.graph.nodes if node.op == "placeholder"]


def install(split: SplitGraph, name: str, runner: Callable) -> None:
    """Make the top-level graph call `runner` for submodule `name`. The attribute goes in the
    instance dict, which attribute lookup reads before nn.Module's submodule table, so the piece's
    fx graph stays in split.module._modules for inspection."""
    split.module.__dict__[name] = runner
