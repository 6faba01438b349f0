"""The Dynamo backend of the compiled forward: fusion passes on the captured graph, then (CPU) the
decomposable ops replaced by their references, then Inductor; at level 2 on CPU with the weights
frozen (freeze.py). At level 3 the graph is split at the splitting ops first and each piece
between them compiled alone with its weights as inputs (CPU: references + Inductor, not frozen,
so a cached piece serves any weights of its shape; CUDA: Inductor; NPU: the piece as is), then,
with a CaptureSpec, wrapped in a CapturedPiece. A decode backend (CompiledModel's decode graph,
CPU level 2) also decomposes rope, the KV write and attention into their traceable forms, and keeps
the weights as inputs. It records what each compile saw, for tests and for the compile-time line."""
from __future__ import annotations

import time
from typing import Callable

from torch import fx

from ascendtile.compilation.cache_key import memory_formats_by_name
from ascendtile.compilation.config import CompilationConfig, CompilationLevel
from ascendtile.compilation.decompose import decompose_to_references
from ascendtile.compilation.freeze import lift_parameters, taking_kept_inputs, widen_bf16_linears
from ascendtile.compilation.piece_capture import CapturedPiece, CaptureSpec
from ascendtile.compilation.piece_signature import PieceSignature
from ascendtile.compilation.piecewise import SplitGraph, example_inputs, install, split_graph, token_symbol
from ascendtile.compilation.passes import run_fusion_passes
from ascendtile.compilation.passes.graph import ascend_op
from ascendtile.platform import cpu_has_bf16_dot

class AscendBackend:
    def __init__(self, config: CompilationConfig, device_type: str, capture: CaptureSpec | None = None,
                 decode: bool = False) -> None:
        """decode: the graphs are decode graphs (CompiledModel's, CPU): their rope, KV write and
        attention are decomposed too (decompose.py), with or without Inductor."""
        self.config, self.device_type, self.capture, self.decode = config, device_type, capture, decode
        self.graph_ops: list[list[str]] = []  # per compile: the ascend ops in the graph after the passes
        self.opaque_ops: list[list[str]] = []  # per decode compile: the ascend ops left after decomposition
        self.pass_counts: list[dict[str, int]] = []  # per compile: rewrites per pass
        self.compile_seconds: list[float] = []
        self.splits: list[SplitGraph] = []  # level 3, per compile
        self.captured: list[CapturedPiece] = []  # level 3 with a CaptureSpec: the pieces that capture
        # per frozen compile on a CPU without bf16 dot products: the bf16 linears widened to fp32
        self.widened_linears: list[int] = []

    @property
    def num_compiles(self) -> int:
        return len(self.graph_ops)

    def __call__(self, gm: fx.GraphModule, example_inputs: list) -> Callable:
        start = time.perf_counter()
        self.pass_counts.append(run_fusion_passes(gm) if self.config.enable_fusion else {})
        self.graph_ops.append([name for name in map(ascend_op, gm.graph.nodes) if name])
        if self.config.level == CompilationLevel.PIECEWISE:
            compiled = self._piecewise(gm)
        elif self.config.use_inductor:
            # A decode graph's weights stay inputs: oneDNN's packed linear costs ~90 µs a call of
            # set-up at decode sizes (aten's matmul ~20 µs; bench/results/2026-11-26-cpu-decode-graph.md),
            # its linears take cpu_linear's kernels (decompose.py), and frozen copies would add the
            # weights' bytes again beside the general graph's.
            freeze = self.device_type == "cpu" and self.config.level == CompilationLevel.DYNAMO_ONCE and not self.decode
            compiled = self._inductor(gm, example_inputs, freeze=freeze)
        else:
            if self.decode:  # the decomposed graph runs as Python: the same values, uncompiled
                self._decompose(gm)
            compiled = gm.forward
        self.compile_seconds.append(time.perf_counter() - start)
        return compiled

    def _inductor(self, gm: fx.GraphModule, example_inputs: list, freeze: bool = False) -> Callable:
        """freeze: fold the weights in as constants (freeze.py); example_inputs must then be the
        real inputs, which only the whole graph's are (a piece's are fake)."""
        kept = None
        if freeze:
            gm, kept = lift_parameters(gm, example_inputs)
            example_inputs = [example_inputs[i] for i in kept]
            if not cpu_has_bf16_dot():
                self.widened_linears.append(widen_bf16_linears(gm))
        if self.device_type == "cpu":
            self._decompose(gm)
        import torch._inductor.config as inductor_config
        from torch._inductor.compile_fx import compile_fx
        from torch._inductor.runtime.cache_dir_utils import temporary_cache_dir

        # Inductor reads its cache location from the environment; this sets it for this compile
        # only and drops the in-memory caches keyed on the old one. A frozen graph holds
        # oneDNN-packed weights, which torch cannot pickle: its FX graph cache bypasses it. The
        # cache keys are the same in every process (cache_key.py).
        # A decode graph calls its ~300 kernels and ops a step from Inductor's C++ wrapper instead of
        # its Python one, the wrapper built apart from the kernels: built with them, at -O3 in one
        # file, SmolLM2's compiles took 255-307 s against 66-135 s. A bf16 SmolLM2 step at batch 32,
        # one process, alternated rounds: 32.6 against 34.5 ms, built in 162 against 174 s from empty
        # caches (bench/results/2026-11-30-amx-tile-linear.md).
        with temporary_cache_dir(self.config.cache_dir), memory_formats_by_name(), \
                inductor_config.patch(freezing=freeze, cpp_wrapper=self.decode, cpp_wrapper_build_separate=self.decode):
            compiled = compile_fx(gm, example_inputs)
        return compiled if kept is None else taking_kept_inputs(compiled, kept)

    def _decompose(self, gm: fx.GraphModule) -> None:
        decompose_to_references(gm, self.decode, self.config.cache_dir)
        if self.decode:
            self.opaque_ops.append([name for name in map(ascend_op, gm.graph.nodes) if name])

    def _piecewise(self, gm: fx.GraphModule) -> Callable:
        split = split_graph(gm, self.config.splitting_ops)
        self.splits.append(split)
        symbol = token_symbol(gm)
        for name in split.pieces:
            piece = split.submodule(name)
            # before compiling: the CPU decomposition hides the ops' in-place writes from it
            signature = PieceSignature.of(piece, symbol) if self.capture is not None else None
            if self.config.use_inductor and self.device_type != "npu":
                fn = self._inductor(piece, example_inputs(piece))
            else:
                fn = piece.forward
            if signature is not None:
                fn = CapturedPiece(name, fn, signature, self.capture)
                self.captured.append(fn)
            install(split, name, fn)
        return split.module
