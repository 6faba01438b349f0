"""Which inputs and outputs of a level-3 piece depend on the token count, and how: what decides
whether the piece can be captured per bucket (piece_capture.py).

A capturable piece takes token tensors (first dim the token count, no other dim depending on
it), ints that are expressions of the token count (re-evaluated at the padded size), and tensors
that never depend on it (weights, KV caches, read at a fixed address); its outputs are token
tensors or token-independent tensors, none of them aliasing an input; and it calls no op tagged
`cudagraph_unsafe` (one that synchronizes with the host: the MoE's routed experts). Anything else
(another dynamic dim on a token tensor, an int of another symbol) leaves the piece uncaptured."""
from __future__ import annotations

from dataclasses import dataclass

import sympy
import torch
from torch import fx
from torch.multiprocessing.reductions import StorageWeakRef


@dataclass
class PieceSignature:
    """Input positions by kind; `sliced[i]`: output i has the token dim first (else it is a
    token-independent tensor, returned as is)."""

    token: list[int]
    ints: dict[int, sympy.Expr]
    fixed: list[int]
    written: list[int]
    sliced: list[bool]
    symbol: sympy.Symbol

    @classmethod
    def of(cls, piece: fx.GraphModule, symbol: sympy.Symbol | None) -> "PieceSignature | None":
        """The signature of a piece traced with token-count symbol `symbol`; None if it cannot
        be captured."""
        if symbol is None or _calls_uncapturable_op(piece):
            return None
        inputs = [node.meta.get("example_value") for node in piece.graph.nodes if node.op == "placeholder"]
        token, ints, fixed = [], {}, []
        for i, value in enumerate(inputs):
            kind = _kind(value, symbol)
            if kind is None:
                return None
            if kind == "int":
                ints[i] = value.node.expr
            (token if kind == "token" else fixed if kind == "fixed" else []).append(i)
        outputs = [node.meta.get("example_value") for node in piece.graph.output_node().args[0]]
        input_storages = {_storage(inputs[i]) for i in token + fixed if isinstance(inputs[i], torch.Tensor)}
        if not token or any(_kind(v, symbol) not in ("token", "fixed") or _storage(v) in input_storages
                            for v in outputs):
            return None  # no token rows, or an output that is no fresh tensor
        written = _written_storages(piece)
        return cls(token, ints, fixed, [i for i in token if _storage(inputs[i]) in written],
                   [_kind(v, symbol) == "token" for v in outputs], symbol)


def _calls_uncapturable_op(piece: fx.GraphModule) -> bool:
    unsafe = getattr(torch.Tag, "cudagraph_unsafe", None)  # absent from older torch releases
    return unsafe is not None and any(isinstance(node.target, torch._ops.OpOverload) and unsafe in node.target.tags
                                      for node in piece.graph.nodes)


def _dims(value: torch.Tensor) -> list[sympy.Expr]:
    return [d.node.expr if isinstance(d, torch.SymInt) else sympy.Integer(d) for d in value.shape]


def _kind(value: object, symbol: sympy.Symbol) -> str | None:
    """The kind of a traced value: "token", "int" (an expression of the token count), "fixed"
    (independent of it), or None (none of these)."""
    if isinstance(value, torch.SymInt):
        return "int" if value.node.expr.free_symbols <= {symbol} else None
    if not isinstance(value, torch.Tensor):
        return "fixed" if value is None or isinstance(value, (bool, int, float, str)) else None
    dims = _dims(value)
    if not any(symbol in d.free_symbols for d in dims):
        return "fixed"
    if dims[0] == symbol and not any(symbol in d.free_symbols for d in dims[1:]):
        return "token"
    return None


def _storage(value: object) -> StorageWeakRef | None:
    return StorageWeakRef(value.untyped_storage()) if isinstance(value, torch.Tensor) else None


def _written_storages(piece: fx.GraphModule) -> set[StorageWeakRef]:
    """Storages the piece writes in place: `Tensor!` arguments of op calls and the self of
    in-place methods (`x.add_(...)`), through any view (views share the fake storage)."""
    written = set()
    for node in piece.graph.nodes:
        if isinstance(node.target, torch._ops.OpOverload):
            args = [a for a, spec in zip(node.args, node.target._schema.arguments)
                    if spec.alias_info is not None and spec.alias_info.is_write]
        elif node.op == "call_method" and node.target.endswith("_"):
            args = node.args[:1]
        else:
            continue
        written |= {_storage(a.meta.get("example_value")) for a in args if isinstance(a, fx.Node)}
    return written - {None}
