"""`torch.ops.ascendtile.routed_experts`: an MoE layer's routed experts as one opaque op, so that
torch.compile's fullgraph trace with dynamic sizes (compilation levels 2 and 3) holds the layer.
The experts run as a loop over the experts a batch hits (moe.py), whose sizes depend on the
routing: Dynamo cannot trace that (GuardOnDataDependentSymNode at `ids.unique().tolist()`). The
op's output has its input's shape and dtype, so its fake impl needs nothing else.

The op names its layer by a key, as vLLM's attention ops name theirs (`layer_name`): the key is a
constant of the traced graph and the layer is looked up when the graph runs, so the experts keep
their own weights (float, oneDNN-packed, W8A8; a tensor-parallel rank's slices) and the op runs
exactly the eager code. It is an internal op of the model layers, not part of the `ascend` op
contract (no kernel), hence its own namespace. The loop reads the expert ids on the host, which a
device graph cannot hold: the op carries torch's `cudagraph_unsafe` tag, and level 3 does not
capture the piece that calls it (compilation/piece_signature.py).
"""
from __future__ import annotations

import itertools
import weakref
from typing import Protocol

import torch

# torch's marker for ops a CUDA graph cannot capture (older torch releases have no such tag).
_UNCAPTURABLE = (torch.Tag.cudagraph_unsafe,) if hasattr(torch.Tag, "cudagraph_unsafe") else ()

_LIB = torch.library.Library("ascendtile", "DEF")
_LIB.define("routed_experts(Tensor hidden, Tensor topk_weights, Tensor topk_ids, str layer) -> Tensor",
            tags=_UNCAPTURABLE)


class RoutedExperts(Protocol):
    def run_routed_experts(self, hidden: torch.Tensor, topk_weights: torch.Tensor,
                           topk_ids: torch.Tensor) -> torch.Tensor: ...


# key -> layer, held weakly: the registry keeps no model alive (a compiled graph's model holds its layers).
_LAYERS: weakref.WeakValueDictionary[str, RoutedExperts] = weakref.WeakValueDictionary()
_KEYS = itertools.count()


def register_layer(layer: RoutedExperts) -> str:
    """A new key under which the op finds `layer`; each layer (and each copy of one) needs its own."""
    key = f"moe{next(_KEYS)}"
    _LAYERS[key] = layer
    return key


def _run(hidden: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor, layer: str) -> torch.Tensor:
    found = _LAYERS.get(layer)
    if found is None:
        raise KeyError(f"layer: no live MoE layer is registered as {layer!r}")
    return found.run_routed_experts(hidden, topk_weights, topk_ids)


def _fake(hidden: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor, layer: str) -> torch.Tensor:
    return torch.empty_like(hidden)


_LIB.impl("routed_experts", _run, "CompositeExplicitAutograd")
torch.library.register_fake("ascendtile::routed_experts", _fake, lib=_LIB)


def routed_experts(hidden: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor, layer: str) -> torch.Tensor:
    """hidden [T, H], topk_weights [T, k] fp32, topk_ids [T, k] -> [T, H] in hidden's dtype: the
    routed experts' weighted sum of the layer registered as `layer` (register_layer)."""
    return torch.ops.ascendtile.routed_experts.default(hidden, topk_weights, topk_ids, layer)
