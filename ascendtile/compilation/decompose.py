"""CPU: replace `ascend` op calls in a Dynamo graph by their pure-torch references, so Inductor
sees (and fuses) the elementwise work inside them instead of calling opaque ops (vLLM's
forward_native idea).

Only families whose references have no data-dependent control flow are decomposed; rope,
kv_cache and the attention references read index ranges on the host (`int(t.max())`), so they
stay opaque calls in a graph that serves every step. A decode graph (CompiledModel's, for steps
where every sequence brings one token) also takes their traceable forms, which read nothing on
the host: rope over positions [T], the KV write into float caches and unified_attention over
float caches, so no `ascend` op is left in a decode step. Its attention, where the C++ kernel
serves its dtype and head dim and builds here (ascendtile/cpu/decode_attention.py), is that
kernel's op instead of the traceable form (bf16 at batch 32: 519 against 834 µs a layer,
bench/results/2026-11-27-cpu-decode-attention-kernel.md). Its linears (oneDNN's packed, or
F.linear) with weights of at least ONEDNN_MIN_WEIGHT_ELEMENTS become `cpu_linear` calls, which run
products of 1 or 2 rows in a C++ kernel (ascendtile/cpu/linear.py; a bf16 SmolLM2 decode step at
batch 1: 16.0 against 18.8 ms, bench/results/2026-11-28-cpu-few-rows-linear.md), and on an x86 CPU
with AVX2 or AVX-512 fp32 products of 4 to 64 rows in its wide kernel; smaller weights stay
with aten, whose call costs less than the op's. bf16 linears whose packs hold their weights in tile
order (compiled_model.py: on an AMX CPU) trace as cpu_linear calls over the tiles already
(layers/linear.py float_linear), which the tile kernel multiplies from 3 to 64 rows. The general
graph keeps rope, the KV write and attention opaque to Inductor (its attention would need the
mixed-batch masks, and the traceable forms double its compile time; the KV write's alone added 27 s to
SmolLM2's 49 s bf16 compile, bench/results/2026-11-30-cpu-kv-write.md), but its rope over positions
[T], its KV write into and its attention over float caches call the CPU kernels' ops where they
serve and build (general_form_of: one pass over the heads instead of the reference's seven tensor
ops, each row copied to its slot with no host read, and attention read from the cache with no padded
fp32 copies; a bf16 SmolLM2 prefill of 32 × 128 tokens 3,011 -> 2,375 ms for rope and attention,
bench/results/2026-11-28-cpu-prefill-kernels.md).
The ops' validators already ran at trace time (each fake impl validates).
"""
from __future__ import annotations

import importlib
from typing import Callable

import torch
from torch import fx

from ascendtile.compilation.passes.graph import ascend_op, example
from ascendtile.cpu import decode_attention as cpu_decode_attention
from ascendtile.cpu import linear as cpu_linear
from ascendtile.cpu import reshape_and_cache_flash as cpu_reshape_and_cache_flash
from ascendtile.cpu import rotary_embedding as cpu_rotary_embedding
from ascendtile.cpu import unified_attention as cpu_unified_attention
from ascendtile.model.layers import linear as model_linear
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


def _argument(node: fx.Node, name: str):
    """The value op call `node` passes for its schema argument `name` (its default if omitted)."""
    arguments = node.target._schema.arguments
    index = next(i for i, a in enumerate(arguments) if a.name == name)
    return node.args[index] if index < len(node.args) else node.kwargs.get(name, arguments[index].default_value)


def decode_form_of(node: fx.Node, name: str, cache_dir: str | None = None) -> Callable | None:
    """The traceable form of op call `node` in a decode graph, or None where it has none: an int8
    KV cache, positions other than [T]. With a cache_dir, attention takes the CPU kernel's op where
    it serves the call and its library builds (or is cached) there."""
    form, dtype_arg = DECODE_FORMS.get(name, (None, None))
    if form is None:
        return None
    if dtype_arg is not None and _argument(node, dtype_arg) != "auto":
        return None
    if name == "rotary_embedding":
        positions = example(node.args[0])
        if positions is None or positions.dim() != 1:
            return None
    if name == "unified_attention" and cache_dir is not None:
        query, key_cache = example(_argument(node, "query")), example(_argument(node, "key_cache"))
        if (query is not None and key_cache is not None and cpu_decode_attention.supports(query, key_cache)
                and cpu_decode_attention.load(cache_dir, [(query.dtype, query.shape[-1])])):
            return cpu_decode_attention.unified_attention_decode_cpu
    return form


def general_form_of(node: fx.Node, name: str, cache_dir: str) -> Callable | None:
    """The general graph's form of op call `node`: rope over positions [T], the KV write into and
    attention over float caches take the CPU kernels' ops (ascendtile/cpu/rotary_embedding.py,
    reshape_and_cache_flash.py, unified_attention.py) where the kernel serves the call and its
    library builds (or is cached) in cache_dir; None for every other call, which stays the op."""
    if name == "rotary_embedding":
        positions, query = example(_argument(node, "positions")), example(_argument(node, "query"))
        key = _argument(node, "key")
        key = None if key is None else example(key)
        if (positions is not None and query is not None and cpu_rotary_embedding.supports(positions, query)
                and (key is None or cpu_rotary_embedding.supports(positions, key))
                and cpu_rotary_embedding.load(cache_dir, [query.dtype])):
            return cpu_rotary_embedding.rotary_embedding_cpu
        return None
    if name not in ("unified_attention", "reshape_and_cache_flash") or _argument(node, "kv_cache_dtype") != "auto":
        return None
    if name == "reshape_and_cache_flash":
        key, key_cache = example(_argument(node, "key")), example(_argument(node, "key_cache"))
        if (key is not None and key_cache is not None and cpu_reshape_and_cache_flash.supports(key, key_cache)
                and cpu_reshape_and_cache_flash.load(cache_dir)):
            return cpu_reshape_and_cache_flash.reshape_and_cache_flash_cpu
        return None
    query, key_cache = example(_argument(node, "query")), example(_argument(node, "key_cache"))
    if (query is None or key_cache is None or not cpu_unified_attention.supports(query, key_cache)
            or not cpu_unified_attention.load(cache_dir, [(query.dtype, query.shape[-1])])):
        return None
    return cpu_unified_attention.unified_attention_cpu


def retarget_linear(node: fx.Node, cache_dir: str) -> bool:
    """Make a decode graph's linear call (F.linear, or onednn_linear over a packed copy) a
    `cpu_linear` call with the same operands, where the weight has at least
    ONEDNN_MIN_WEIGHT_ELEMENTS elements, the kernel serves it and its library builds in cache_dir."""
    if node.op != "call_function" or node.target not in (torch._C._nn.linear, torch.ops.ascendtile.onednn_linear.default):
        return False
    weight = example(node.args[1])
    if (weight is None or weight.numel() < model_linear.ONEDNN_MIN_WEIGHT_ELEMENTS or not cpu_linear.supports(weight)
            or not cpu_linear.load(cache_dir, [weight.dtype])):
        return False
    if node.target is torch._C._nn.linear:
        bias = node.args[2] if len(node.args) > 2 else node.kwargs.get("bias")
        node.args, node.kwargs = (node.args[0], node.args[1], None, bias), {}
    node.target = torch.ops.ascendtile.cpu_linear.default
    return True


def decompose_to_references(gm: fx.GraphModule, decode: bool = False, cache_dir: str | None = None) -> int:
    """Retarget decomposable op calls in place; returns how many. decode: gm is a decode graph
    (every sequence one new token), whose rope, KV write and attention take their traceable forms
    (attention: the CPU kernel's op where it serves, built in cache_dir) and whose linears take
    cpu_linear (with a cache_dir). Otherwise, with a cache_dir, rope and attention take the CPU
    kernels where they serve (general_form_of)."""
    count = 0
    for node in gm.graph.nodes:
        if decode and cache_dir is not None and retarget_linear(node, cache_dir):
            count += 1
            continue
        name = ascend_op(node)
        reference = reference_of(name) if name else None
        if reference is None and name and decode:
            reference = decode_form_of(node, name, cache_dir)
        elif reference is None and name and cache_dir is not None:
            reference = general_form_of(node, name, cache_dir)
        if reference is not None:
            node.target = reference
            count += 1
    gm.recompile()
    return count
