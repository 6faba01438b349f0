"""What generate() returns: vLLM's RequestOutput / CompletionOutput shapes plus timing metrics."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RequestMetrics:
    """Wall-clock times (time.perf_counter seconds) of one request."""

    arrival_time: float
    first_scheduled_time: float | None = None
    first_token_time: float | None = None
    finished_time: float | None = None
    num_preemptions: int = 0
    num_cached_tokens: int = 0  # prompt tokens served from the prefix cache (at first admission)

    @property
    def time_to_first_token(self) -> float | None:
        return None if self.first_token_time is None else self.first_token_time - self.arrival_time


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    finish_reason: str | None  # "stop" | "length" | "error"
    stop_reason: str | int | None = None  # the stop string or stop token id that ended it
    logprobs: list[dict[int, float]] | None = None  # per generated token: {token_id: logprob}
    cumulative_logprob: float | None = None


@dataclass
class RequestOutput:
    request_id: int
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool
    metrics: RequestMetrics
    error: str | None = None  # why a request that could never run was rejected
    per_token_latency: list[float] = field(default_factory=list)  # seconds between successive tokens

    @property
    def mean_per_token_latency(self) -> float | None:
        return sum(self.per_token_latency) / len(self.per_token_latency) if self.per_token_latency else None
