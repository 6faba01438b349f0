"""CPU: the weights frozen into the compiled graph (Inductor's freezing): Inductor folds them in as
constants and packs the fp32 linears' weights for oneDNN (`mkldnn._linear_pointwise`); on a CPU
without bf16 dot products, bf16 linears are widened to fp32 first so that theirs are packed too
(widen_bf16_linears).

Inductor freezes only the parameters of the graph module it is given (aot_autograd lifts them
and their values become constants). Dynamo, inlining nn modules as it does by default, hands the
backend every weight as a graph input instead, so `freezing=True` around Inductor alone freezes
nothing. Setting it while Dynamo traces would make Dynamo install every tensor attribute of the
model in the graph, the KV caches too: after `allocate_kv_cache` replaced them the graph would
still write the caches it was traced with (levels 2 and 3 evaluate no guards after the trace).
So the backend turns only the parameter inputs into parameters of the graph module.

The weights are read once, when the graph compiles: a weight replaced or changed in place later is
not seen by it (the runtime never changes weights after loading). Inductor freezes only when that
first call runs with grad off, as the runtime's does (inference_mode).
"""
from __future__ import annotations

import operator
from typing import Callable, Sequence

import torch
from torch import fx


def lift_parameters(gm: fx.GraphModule, example_inputs: Sequence) -> tuple[fx.GraphModule, list[int]]:
    """A copy of gm in which each input whose example is a floating-point nn.Parameter is a
    parameter of the module instead (read with get_attr), and the indices of the inputs the copy
    still takes. gm itself is left as it is: Dynamo reads its call arguments off gm's graph.

    Integer (W8A8) weights stay inputs: frozen, Inductor would fold their conversion to float into
    an fp32 constant, four times their size."""
    placeholders = gm.graph.find_nodes(op="placeholder")
    if len(placeholders) != len(example_inputs):
        raise ValueError(f"example_inputs: {len(example_inputs)} values for {len(placeholders)} graph inputs")
    graph, copies = fx.Graph(), {}
    graph.output(graph.graph_copy(gm.graph, copies))
    lifted = fx.GraphModule(gm, graph)
    kept = []
    for index, (node, value) in enumerate(zip(placeholders, example_inputs)):
        if not (isinstance(value, torch.nn.Parameter) and value.is_floating_point()):
            kept.append(index)
            continue
        name, placeholder = f"frozen_{node.name}", copies[node]
        lifted.register_parameter(name, value)
        with graph.inserting_before(placeholder):
            attr = graph.get_attr(name)
        attr.meta = dict(placeholder.meta)
        placeholder.replace_all_uses_with(attr)
        graph.erase_node(placeholder)
    lifted.recompile()
    return lifted, kept


def widen_bf16_linears(gm: fx.GraphModule) -> int:
    """Each linear of gm (lift_parameters' copy) whose weight is a frozen bf16 parameter becomes
    the same product in fp32: x, the weight and the bias widened (exact), the product rounded to
    bf16 once, as aten's bf16 GEMM rounds after its fp32 accumulation. Freezing then folds the
    widened weight into an fp32 constant, which Inductor packs for oneDNN's fp32 linear: for a
    CPU without bf16 dot products (the caller asks), where aten's bf16 GEMM is ~4x slower than fp32
    and Inductor packs no bf16 weight; the eager model and the decode graph take pack_weight's fp32
    copy the same way. Returns how many linears it widened."""
    count = 0
    for node in list(gm.graph.find_nodes(op="call_function", target=torch._C._nn.linear)):
        weight = node.args[1]
        if not (weight.op == "get_attr" and operator.attrgetter(weight.target)(gm).dtype == torch.bfloat16):
            continue
        x = node.args[0]
        bias = node.args[2] if len(node.args) > 2 else node.kwargs.get("bias")
        with gm.graph.inserting_before(node):
            operands = [None if value is None else gm.graph.call_method("to", (value, torch.float32))
                        for value in (x, weight, bias)]
            wide = gm.graph.call_function(torch._C._nn.linear, tuple(operands))
            rounded = gm.graph.call_method("to", (wide, torch.bfloat16))
        node.replace_all_uses_with(rounded)
        gm.graph.erase_node(node)
        count += 1
    if count:
        gm.recompile()
    return count


def taking_kept_inputs(compiled: Callable, kept: list[int]) -> Callable:
    """compiled, which takes only the inputs at indices `kept`, as a callable of all of them."""
    def run(*args):
        return compiled(*[args[i] for i in kept])
    return run
