"""FX passes on the Dynamo graph of a model forward: split W8A8 linears where a fusion can follow,
then the fusion passes (fusion.py)."""
from __future__ import annotations

import torch
from torch import fx

from ascendtile.compilation.passes.fusion import FUSIONS
from ascendtile.compilation.passes.split_w8a8 import split_w8a8_linears


def run_fusion_passes(gm: fx.GraphModule) -> dict[str, int]:
    """Rewrite gm in place; returns the number of rewrites per pass (split + each fusion)."""
    counts = {"split_w8a8_linear": split_w8a8_linears(gm.graph, FUSIONS)}
    for fusion in FUSIONS:
        counts[fusion.name] = fusion.apply(gm.graph)
    for node in reversed(list(gm.graph.nodes)):  # the fused-away producers' output buffers
        if node.target in (torch.empty, torch.empty_like) and not node.users:
            gm.graph.erase_node(node)
    gm.recompile()
    return counts
