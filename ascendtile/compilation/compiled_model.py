"""CompiledModel: a RuntimeModel whose forward runs compiled at the config's level; every other
attribute (compute_logits, allocate_kv_cache, ...) is the wrapped model's.

Level 1 is torch.compile with Dynamo's defaults: its guards run every call, a changed size or
metadata int first seen static recompiles, and (fullgraph off, as by default) past Dynamo's
recompile limit a call runs eagerly instead of failing. Level 2 traces once with every input dim
and int dynamic (backed_size_oblivious: a size of 1 in the first call is not specialized either), and
after that first compile skips guard evaluation, so every step runs the one graph with no
per-call guard cost. That is sound because the trace depends on no input value: the metadata
ints reach only the attention ops (`SymInt` in their schemas) and nothing branches on a size.
Level 3 traces exactly as level 2; its backend splits the graph at the attention ops
(backend.py, piecewise.py) and, given a CaptureSpec, captures the pieces per size.

On CPU with cpu_decode_graph set, level 2 gives decode steps (every sequence one new token) a
graph of their own, in which rope, the KV write and attention take their traceable forms
(decompose.py): a decode step then runs no `ascend` op and Inductor compiles all of it but the
linears whose weights are packed for oneDNN (layers/linear.py: onednn_linear). Unlike the
general graph it keeps its guards: Inductor's lowering of the gathers and of rope's strided writes
guards on the batch being 1 or more, so a batch of one gets a compile of its own (Dynamo's guards,
not an assumption, decide). Its caches are traced with static shapes, which makes the layers'
kernels one set instead of one per layer's cache symbols; caches of another shape fail its guards
and retrace it. W4A16 linears take torch's int4 kernel there (model/layers/int4pack.py), as eager
decode does; the general graph runs their exact op.
"""
from __future__ import annotations

import contextlib
import types
from typing import Callable

import torch
import torch._dynamo.config as dynamo_config
import torch.fx.experimental._config as fx_config
from torch import nn

from ascendtile.compilation.backend import AscendBackend
from ascendtile.compilation.config import CompilationConfig, CompilationLevel
from ascendtile.compilation.piece_capture import CaptureSpec
from ascendtile.model.attention_metadata import AttentionMetadata
from ascendtile.model.layers import int4pack
from ascendtile.ops._registry import trusted_calls


class CompiledModel:
    def __init__(self, model: nn.Module, config: CompilationConfig, capture: CaptureSpec | None = None) -> None:
        self.model, self.config = model, config
        device_type = next(model.parameters()).device.type
        self.backend = AscendBackend(config, device_type, capture)
        once = config.level >= CompilationLevel.DYNAMO_ONCE
        self._forward = torch.compile(_own_code(model.forward), backend=self.backend, fullgraph=once,
                                      dynamic=True if once else None)
        self.decode_backend = (AscendBackend(config, device_type, decode=True)
                               if device_type == "cpu" and config.level == CompilationLevel.DYNAMO_ONCE
                               and config.cpu_decode_graph else None)
        self._decode_forward: Callable | None = None

    def __call__(self, input_ids: torch.Tensor, positions: torch.Tensor, attn_metadata: AttentionMetadata) -> torch.Tensor:
        # A validated step's ops skip their validators inside the graph too (the eager model skips
        # them through unchecked(); a graph calls the registered ops).
        with trusted_calls() if attn_metadata.validated else contextlib.nullcontext():
            return self._run(input_ids, positions, attn_metadata)

    def _run(self, input_ids: torch.Tensor, positions: torch.Tensor, attn_metadata: AttentionMetadata) -> torch.Tensor:
        if self.config.level == CompilationLevel.DYNAMO_AS_IS:
            return self._forward(input_ids, positions, attn_metadata)
        # floats (eps, softmax scale) stay constants: symbolic ones make Inductor restart the trace.
        # No duck shaping: a block-table width that happens to equal a constant model dim (KV heads)
        # would share its symbol and be specialized with it.
        with fx_config.patch(backed_size_oblivious=True, use_duck_shape=False), \
                dynamo_config.patch(specialize_float=True):
            if (self.decode_backend is not None and attn_metadata.validated and attn_metadata.max_seqlen_q == 1
                    and input_ids.shape[0] == attn_metadata.num_seqs):
                return self._run_decode(input_ids, positions, attn_metadata)
            if not self.backend.num_compiles:
                return self._forward(input_ids, positions, attn_metadata)
            with torch.compiler.set_stance(skip_guard_eval_unsafe=True):
                return self._forward(input_ids, positions, attn_metadata)

    def _run_decode(self, input_ids: torch.Tensor, positions: torch.Tensor,
                    attn_metadata: AttentionMetadata) -> torch.Tensor:
        if self._decode_forward is None:
            self._decode_forward = torch.compile(_own_code(self.model.forward), backend=self.decode_backend,
                                                 fullgraph=True, dynamic=True)
        # The decode graph evaluates its guards (Inductor's lowering of the gathers guards on the
        # batch size being 1 or more), so a batch of one and a cache of another shape retrace it.
        # Its caches are static while it runs: the marks live on the tensors, and the general
        # graph must keep the caches' sizes symbolic.
        caches = [t for attn in self.model.attention_layers() for t in vars(attn).values()
                  if isinstance(t, torch.Tensor) and t.dim()]  # mark_static marks nothing on a 0-dim tensor
        for cache in caches:
            torch._dynamo.mark_static(cache)
        try:
            with int4pack.guarded_graph():
                return self._decode_forward(input_ids, positions, attn_metadata)
        finally:
            for cache in caches:
                del cache._dynamo_static_indices, cache._has_dynamo_dim_marking

    def __getattr__(self, name: str):
        return getattr(self.model, name)

    @property
    def compile_seconds(self) -> float:
        """Seconds spent compiling, both graphs."""
        decode = self.decode_backend
        return sum(self.backend.compile_seconds) + (sum(decode.compile_seconds) if decode is not None else 0.0)

    def describe(self) -> str:
        """One line: level, compiles, seconds spent compiling (level 3: and the pieces compiled;
        CPU level 2: and the decode graph's compiles)."""
        pieces = sum(len(split.pieces) for split in self.backend.splits)
        decode = self.decode_backend
        return (f"compilation level {int(self.config.level)} ({self.config.level.name}): "
                f"{self.backend.num_compiles} compile(s){f' ({pieces} pieces)' if pieces else ''}"
                f"{f' + {decode.num_compiles} of the decode graph' if decode is not None else ''}, "
                f"{self.compile_seconds:.1f} s")


def _own_code(method: types.MethodType) -> types.MethodType:
    """The bound method over a private copy of its code object. Dynamo keeps its compiled entries
    (and their recompile limit) per code object: every model of a class would otherwise share one
    cache, so a process that builds several LLMs would pile entries onto it, keep old models'
    graphs alive and, past the limit, fail level 2's fullgraph compile."""
    fn = method.__func__
    copy = types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    return types.MethodType(copy, method.__self__)


def compile_model(model: nn.Module, config: CompilationConfig,
                  capture: CaptureSpec | None = None) -> nn.Module | CompiledModel:
    """The model itself at level 0, else a CompiledModel. capture: level 3's per-size capture of
    the pieces (ignored below level 3)."""
    if config.level == CompilationLevel.NO_COMPILATION:
        return model
    return CompiledModel(model, config, capture if config.level == CompilationLevel.PIECEWISE else None)
