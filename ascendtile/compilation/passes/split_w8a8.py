"""Split w8a8_linear into its int8 quant + scaled_mm where a fusion pass can then take the quant.

The model's Linear calls one op, w8a8_linear, which quantizes its input inside; the fused
norm/activation + quant ops need that quant as a node of its own. So, as vLLM's compiled W8A8
linear does, a w8a8_linear whose 2-D input was last written by a producer a fusion can take
(rms_norm, fused_add_rms_norm with a weight; silu_and_mul with a static scale) becomes
    q = empty_like(x, int8); [s = empty((T, 1), fp32)]
    dynamic_scaled_int8_quant(q, x, s, None)   or   static_scaled_int8_quant(q, x, input_scale, None)
    y = empty((T, N), x.dtype); scaled_mm(y, q, weight.t(), s or input_scale, weight_scale, bias)
which computes the same values as w8a8_linear (both references quantize and run the same exact
int8 GEMM). Other w8a8_linears stay whole: splitting them gains nothing.
"""
from __future__ import annotations

import torch
from torch import fx

from ascendtile.compilation.passes.fusion import DYNAMIC, STATIC, PairFusion
from ascendtile.compilation.passes.graph import ascend_op, example, last_writer

ascend = torch.ops.ascend


def split_w8a8_linears(graph: fx.Graph, fusions: tuple[PairFusion, ...]) -> int:
    """Split each w8a8_linear a fusion in `fusions` can follow; returns how many."""
    count = 0
    for linear in [n for n in graph.nodes if ascend_op(n) == "w8a8_linear"]:
        x, weight, weight_scale, input_scale, bias = linear.args
        value = example(x)
        if value is None or value.dim() != 2:
            continue
        writer = last_writer(x, linear)
        quant = DYNAMIC if input_scale is None else STATIC
        if not any(f.quant == quant and f.fits(writer, x) for f in fusions):
            continue
        _replace(graph, linear, value, quant)
        count += 1
    return count


def _replace(graph: fx.Graph, linear: fx.Node, value: torch.Tensor, quant: str) -> None:
    x, weight, weight_scale, input_scale, bias = linear.args
    n = linear.meta["example_value"].shape[-1]  # out_features: static (weights are not dynamic)
    with graph.inserting_before(linear):
        rows = graph.call_function(torch.ops.aten.sym_size.int, (x, 0))
        q = graph.call_function(torch.empty_like, (x,), {"dtype": torch.int8, "memory_format": torch.contiguous_format})
        if quant == DYNAMIC:
            scales = graph.call_function(torch.empty, ((rows, 1),), {"dtype": torch.float32, "device": value.device})
            graph.call_function(ascend.dynamic_scaled_int8_quant.default, (q, x, scales, None))
        else:
            scales = input_scale
            graph.call_function(ascend.static_scaled_int8_quant.default, (q, x, input_scale, None))
        weight_t = graph.call_function(torch.ops.aten.t.default, (weight,))
        out = graph.call_function(torch.empty, ((rows, n),), {"dtype": value.dtype, "device": value.device})
        graph.call_function(ascend.scaled_mm.default, (out, q, weight_t, scales, weight_scale, bias))
    out.meta["example_value"] = linear.meta["example_value"]  # later linears read their input's shape from it
    linear.replace_all_uses_with(out)
    graph.erase_node(linear)
