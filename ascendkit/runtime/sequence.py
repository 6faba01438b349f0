"""Sequence: one request's tokens, KV blocks and progress through the scheduler.

num_computed_tokens counts the leading tokens whose KV is in the cache. A step computes the
next chunk token_ids[num_computed_tokens : num_computed_tokens + n]; when that chunk reaches the
last token, the step also samples one new token. Preemption frees the blocks and resets
num_computed_tokens to 0: the prompt and the tokens generated so far are recomputed later.
"""
from __future__ import annotations

import enum
import time

from ascendkit.runtime.outputs import RequestMetrics
from ascendkit.runtime.sampling_params import SamplingParams


class SequenceStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


class Sequence:
    def __init__(self, seq_id: int, prompt_token_ids: list[int], params: SamplingParams, max_model_len: int,
                 prompt: str | None = None) -> None:
        self.seq_id = seq_id
        self.prompt = prompt
        self.prompt_token_ids = list(prompt_token_ids)
        self.token_ids = list(prompt_token_ids)
        self.num_prompt_tokens = len(self.token_ids)
        self.params = params
        # total length at which generation stops with "length"
        self.max_len = min(self.num_prompt_tokens + params.max_tokens, max_model_len)
        self.status = SequenceStatus.WAITING
        self.block_table: list[int] = []
        self.num_computed_tokens = 0
        self.finish_reason: str | None = None
        self.stop_reason: str | int | None = None
        self.error: str | None = None
        self.text = ""  # set incrementally when stop strings are watched, else at finish
        self.logprobs: list[dict[int, float]] | None = [] if params.logprobs is not None else None
        self.cumulative_logprob = 0.0
        self.metrics = RequestMetrics(arrival_time=time.perf_counter())
        self.token_times: list[float] = []

    def __len__(self) -> int:
        return len(self.token_ids)

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens:]

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def num_uncomputed(self) -> int:
        return len(self.token_ids) - self.num_computed_tokens

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED

    def finish(self, reason: str, stop_reason: str | int | None = None, error: str | None = None) -> None:
        self.status = SequenceStatus.FINISHED
        self.finish_reason, self.stop_reason, self.error = reason, stop_reason, error
        self.metrics.finished_time = time.perf_counter()
