"""CompiledModel: a RuntimeModel whose forward runs compiled at the config's level; every other
attribute (compute_logits, allocate_kv_cache, ...) is the wrapped model's.

Level 1 is torch.compile with Dynamo's defaults: its guards run every call, a changed size or
metadata int first seen static recompiles, and (fullgraph off, as by default) past Dynamo's
recompile limit a call runs eagerly instead of failing. Every model instance's forward shares one
code object, so each CompiledModel isolates its recompiles: the limit counts its own compiles, not
those of earlier models in the process (without that, level 2's fullgraph compile fails once
earlier instances have filled the shared limit). Level 2 traces once with every input dim and int
dynamic (backed_size_oblivious: a size of 1 in the first call is not specialized either), and
after that first compile skips guard evaluation, so every step runs the one graph with no
per-call guard cost. That is sound because the trace depends on no input value: the metadata
ints reach only the attention ops (`SymInt` in their schemas) and nothing branches on a size.
"""
from __future__ import annotations

import torch
import torch._dynamo.config as dynamo_config
import torch.fx.experimental._config as fx_config
from torch import nn

from ascendkit.compilation.backend import AscendBackend
from ascendkit.compilation.config import CompilationConfig, CompilationLevel
from ascendkit.model.attention_metadata import AttentionMetadata


class CompiledModel:
    def __init__(self, model: nn.Module, config: CompilationConfig) -> None:
        if config.level == CompilationLevel.PIECEWISE:
            raise NotImplementedError("level: 3 (PIECEWISE) is not implemented yet; use 0, 1 or 2")
        self.model, self.config = model, config
        device_type = next(model.parameters()).device.type
        self.backend = AscendBackend(config, device_type)
        once = config.level == CompilationLevel.DYNAMO_ONCE
        self._forward = torch.compile(model.forward, backend=self.backend, fullgraph=once,
                                      dynamic=True if once else None, isolate_recompiles=True)

    def __call__(self, input_ids: torch.Tensor, positions: torch.Tensor, attn_metadata: AttentionMetadata) -> torch.Tensor:
        if self.config.level == CompilationLevel.DYNAMO_AS_IS:
            return self._forward(input_ids, positions, attn_metadata)
        # floats (eps, softmax scale) stay constants: symbolic ones make Inductor restart the trace.
        # No duck shaping: a block-table width that happens to equal a constant model dim (KV heads)
        # would share its symbol and be specialized with it.
        with fx_config.patch(backed_size_oblivious=True, use_duck_shape=False), \
                dynamo_config.patch(specialize_float=True):
            if not self.backend.num_compiles:
                return self._forward(input_ids, positions, attn_metadata)
            with torch.compiler.set_stance(skip_guard_eval_unsafe=True):
                return self._forward(input_ids, positions, attn_metadata)

    def __getattr__(self, name: str):
        return getattr(self.model, name)

    def describe(self) -> str:
        """One line: level, compiles, seconds spent compiling."""
        seconds = sum(self.backend.compile_seconds)
        return (f"compilation level {int(self.config.level)} ({self.config.level.name}): "
                f"{self.backend.num_compiles} compile(s), {seconds:.1f} s")


def compile_model(model: nn.Module, config: CompilationConfig) -> nn.Module | CompiledModel:
    """The model itself at level 0, else a CompiledModel."""
    if config.level == CompilationLevel.NO_COMPILATION:
        return model
    return CompiledModel(model, config)
