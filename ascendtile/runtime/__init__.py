"""Offline generation runtime: LLM, SamplingParams and request outputs (vLLM's offline API
shape) over a scheduler with continuous batching, a paged KV cache with prefix caching, chunked
prefill, preemption by recompute and bucketed decode graphs. The same names are importable
from `ascendtile` itself (vLLM's habit).

Flow: LLM -> Engine -> Scheduler (with the BlockManager) -> ModelRunner (-> GraphRunner) ->
Sampler, then StopChecker. A Sequence changes only through its own methods; the model is
anything satisfying RuntimeModel (model_interface.py).

Exports load on first use, so the CLI parser (ascendtile.runtime.cli) stays light to import."""
from __future__ import annotations

import importlib

_EXPORTS = {
    "LLM": "ascendtile.runtime.llm", "GenerationStats": "ascendtile.runtime.generation",
    "CompletionOutput": "ascendtile.runtime.outputs", "RequestMetrics": "ascendtile.runtime.outputs",
    "RequestOutput": "ascendtile.runtime.outputs", "SamplingParams": "ascendtile.runtime.sampling_params",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'ascendtile.runtime' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
