"""The Dynamo backend of the compiled forward: fusion passes on the captured graph, then (CPU) the
decomposable ops replaced by their references, then Inductor. It records what each compile saw,
for tests and for the compile-time line."""
from __future__ import annotations

import os
import time

import torch
from torch import fx

from ascendkit.compilation.config import CompilationConfig
from ascendkit.compilation.decompose import decompose_to_references
from ascendkit.compilation.passes import run_fusion_passes
from ascendkit.compilation.passes.graph import ascend_op


class AscendBackend:
    def __init__(self, config: CompilationConfig, device_type: str) -> None:
        self.config, self.device_type = config, device_type
        self.graph_ops: list[list[str]] = []  # per compile: the ascend ops in the graph after the passes
        self.pass_counts: list[dict[str, int]] = []  # per compile: rewrites per pass
        self.compile_seconds: list[float] = []

    @property
    def num_compiles(self) -> int:
        return len(self.graph_ops)

    def __call__(self, gm: fx.GraphModule, example_inputs: list) -> object:
        start = time.perf_counter()
        self.pass_counts.append(run_fusion_passes(gm) if self.config.enable_fusion else {})
        self.graph_ops.append([name for name in map(ascend_op, gm.graph.nodes) if name])
        if not self.config.use_inductor:
            self.compile_seconds.append(time.perf_counter() - start)
            return gm.forward
        if self.device_type == "cpu":
            decompose_to_references(gm)
        if self.config.cache_dir is not None:
            # Inductor reads its cache location from the environment on every lookup
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = self.config.cache_dir
        from torch._inductor.compile_fx import compile_fx

        compiled = compile_fx(gm, example_inputs)
        self.compile_seconds.append(time.perf_counter() - start)
        return compiled

