"""Offline generation runtime: LLM, SamplingParams and request outputs (vLLM's offline API
shape) over a scheduler with continuous batching, a paged KV cache with prefix caching, chunked
prefill, preemption by recompute and bucketed decode graphs."""
from ascendkit.runtime.llm import LLM, GenerationStats
from ascendkit.runtime.outputs import CompletionOutput, RequestMetrics, RequestOutput
from ascendkit.runtime.sampling_params import SamplingParams

__all__ = ["LLM", "GenerationStats", "CompletionOutput", "RequestMetrics", "RequestOutput", "SamplingParams"]
