"""Fusion passes: a producer op whose output feeds an int8 quant becomes one fused op (vLLM's
RMSNorm+quant and SiLU·mul+quant fusions), on the Dynamo-level FX graph.

Each PairFusion is one pass: its pattern is (producer, quant) where the quant reads the tensor
the producer writes (`link`, argument index into the producer) and has no zero point; its
replacement builds the fused op's arguments from the two matched nodes. A producer that passes
None for an argument the fused op needs as a tensor (`required`: rms_norm's optional weight,
which the fused norm + quant ops do not take as optional) stays unfused. The fused op reuses the
quant's output buffers and is placed where the quant was, so a match also requires that nothing
else reads the tensors the producer writes between the two nodes (their writes now happen
later), and nothing reads `link` after the quant (the fused op does not materialize it).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import fx

from ascendtile.compilation.passes.graph import ascend_op, last_writer, value_readers_between, written_args

ascend = torch.ops.ascend
STATIC, DYNAMIC = "static_scaled_int8_quant", "dynamic_scaled_int8_quant"


@dataclass(frozen=True)
class PairFusion:
    name: str
    producer: str  # ascend op name
    quant: str  # STATIC or DYNAMIC
    link: int  # index of the producer's argument the quant reads
    replacement: Callable[[fx.Node, fx.Node], tuple[torch._ops.OpOverload, tuple]]
    required: tuple[int, ...] = ()  # producer arguments the fused op takes as (non-optional) tensors

    def fits(self, producer: fx.Node | None, value: fx.Node) -> bool:
        """producer is this fusion's op, writes value at `link` and passes every required argument."""
        return (producer is not None and ascend_op(producer) == self.producer and producer.args[self.link] is value
                and all(producer.args[i] is not None for i in self.required))

    def match(self, quant: fx.Node) -> fx.Node | None:
        """The producer node fused with this quant node, or None."""
        if ascend_op(quant) != self.quant or quant.args[3] is not None:  # symmetric only
            return None
        producer = last_writer(quant.args[1], quant)
        if not self.fits(producer, quant.args[1]):
            return None
        if any(value_readers_between(t, producer, quant) for t in written_args(producer)):
            return None
        if value_readers_between(quant.args[1], quant, quant, after=True):
            return None
        return producer

    def apply(self, graph: fx.Graph) -> int:
        """Rewrite every match in graph; returns how many."""
        count = 0
        for quant in [n for n in graph.nodes if ascend_op(n) == self.quant]:
            producer = self.match(quant)
            if producer is None:
                continue
            op, args = self.replacement(producer, quant)
            with graph.inserting_before(quant):
                graph.call_function(op, args)
            graph.erase_node(quant)
            graph.erase_node(producer)
            count += 1
        return count


# rms_norm(out, x, w, eps); dynamic_scaled_int8_quant(q, out, s, None)
#   => rms_norm_dynamic_per_token_quant(q, x, w, s, eps, None, None)
RMS_NORM_DYNAMIC = PairFusion(
    "rms_norm+dynamic_quant", "rms_norm", DYNAMIC, 0,
    lambda norm, q: (ascend.rms_norm_dynamic_per_token_quant.default,
                     (q.args[0], norm.args[1], norm.args[2], q.args[2], norm.args[3], None, None)),
    required=(2,))
# rms_norm(out, x, w, eps); static_scaled_int8_quant(q, out, scale, None)
#   => rms_norm_static_int8_quant(q, x, w, scale, eps)
RMS_NORM_STATIC = PairFusion(
    "rms_norm+static_quant", "rms_norm", STATIC, 0,
    lambda norm, q: (ascend.rms_norm_static_int8_quant.default,
                     (q.args[0], norm.args[1], norm.args[2], q.args[2], norm.args[3])),
    required=(2,))
# fused_add_rms_norm(h, r, w, eps); static_scaled_int8_quant(q, h, scale, None)
#   => fused_add_rms_norm_static_int8_quant(q, h, r, w, scale, eps)
ADD_RMS_NORM_STATIC = PairFusion(
    "fused_add_rms_norm+static_quant", "fused_add_rms_norm", STATIC, 0,
    lambda norm, q: (ascend.fused_add_rms_norm_static_int8_quant.default,
                     (q.args[0], norm.args[0], norm.args[1], norm.args[2], q.args[2], norm.args[3])),
    required=(2,))
# fused_add_rms_norm(h, r, w, eps); dynamic_scaled_int8_quant(q, h, s, None)
#   => rms_norm_dynamic_per_token_quant(q, h, w, s, eps, None, r)
ADD_RMS_NORM_DYNAMIC = PairFusion(
    "fused_add_rms_norm+dynamic_quant", "fused_add_rms_norm", DYNAMIC, 0,
    lambda norm, q: (ascend.rms_norm_dynamic_per_token_quant.default,
                     (q.args[0], norm.args[0], norm.args[2], q.args[2], norm.args[3], None, norm.args[1])),
    required=(2,))
# silu_and_mul(out, x); static_scaled_int8_quant(q, out, scale, None) => silu_and_mul_quant(q, x, scale)
SILU_MUL_STATIC = PairFusion(
    "silu_and_mul+static_quant", "silu_and_mul", STATIC, 0,
    lambda act, q: (ascend.silu_and_mul_quant.default, (q.args[0], act.args[1], q.args[2])))

FUSIONS: tuple[PairFusion, ...] = (RMS_NORM_DYNAMIC, RMS_NORM_STATIC, ADD_RMS_NORM_STATIC, ADD_RMS_NORM_DYNAMIC,
                                   SILU_MUL_STATIC)
