"""Sequence: one request's tokens, KV blocks and progress through the scheduler. It owns its
state: every change goes through one of its methods, called by exactly one part of the runtime.

num_computed_tokens counts the leading tokens whose KV is in the cache. A step computes the
next chunk token_ids[num_computed_tokens : num_computed_tokens + n]; when that chunk reaches the
last token, the step also samples one new token. Preemption frees the blocks and resets
num_computed_tokens to 0: the prompt and the tokens generated so far are recomputed later.

Who calls what (the BlockManager only reads sequences and hands back block ids; the StopChecker
only reads them and hands back a decision):
- Scheduler: assign_blocks / extend_blocks (with the BlockManager's block ids), start_running
  (admission), reset_for_recompute (preemption), release_blocks (after finishing),
  finish("error") for a request that can never run;
- Engine: advance (a chunk's KV was computed), append_token (a sampled token), finish (with the
  StopChecker's decision).
"""
from __future__ import annotations

import enum
import time

from ascendtile.runtime.outputs import RequestMetrics
from ascendtile.runtime.sampling_params import SamplingParams


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
        self.text = ""  # set at finish
        self.logprobs: list[dict[int, float]] | None = [] if params.logprobs is not None else None
        self.cumulative_logprob = 0.0
        self.metrics = RequestMetrics(arrival_time=time.perf_counter())
        self.token_times: list[float] = []

    def __len__(self) -> int:
        return len(self.token_ids)

    @property
    def last_token(self) -> int:
        return self.token_ids[-1]

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

    # KV blocks (ids from the BlockManager)

    def assign_blocks(self, block_ids: list[int], num_cached_tokens: int) -> None:
        """Take a fresh block table whose first num_cached_tokens tokens' KV is already cached."""
        assert not self.block_table, "assign_blocks: sequence already holds blocks"
        self.block_table = list(block_ids)
        self.num_computed_tokens = num_cached_tokens

    def extend_blocks(self, block_ids: list[int]) -> None:
        self.block_table.extend(block_ids)

    def release_blocks(self) -> None:
        """Forget the block table (the BlockManager has dropped its references): no KV is cached."""
        self.block_table = []
        self.num_computed_tokens = 0

    # progress

    def start_running(self) -> None:
        """Admitted by the scheduler; the first admission records its time and the prompt tokens
        served from the prefix cache."""
        if self.metrics.first_scheduled_time is None:
            self.metrics.first_scheduled_time = time.perf_counter()
            self.metrics.num_cached_tokens = self.num_computed_tokens
        self.status = SequenceStatus.RUNNING

    def advance(self, num_tokens: int) -> None:
        """The KV of the next num_tokens tokens has been computed."""
        assert 0 <= num_tokens <= self.num_uncomputed, "advance: past the last token"
        self.num_computed_tokens += num_tokens

    def append_token(self, token: int, logprobs: dict[int, float] | None, now: float) -> None:
        """Add a sampled token (with its logprobs entry when requested) sampled at time `now`."""
        self.token_ids.append(token)
        if self.logprobs is not None:
            self.logprobs.append(logprobs)
            self.cumulative_logprob += logprobs[token]
        if self.metrics.first_token_time is None:
            self.metrics.first_token_time = now
        self.token_times.append(now)

    def reset_for_recompute(self) -> None:
        """Preempted: its blocks are gone; it waits again and recomputes every token it has."""
        self.release_blocks()
        self.status = SequenceStatus.WAITING
        self.metrics.num_preemptions += 1

    def finish(self, reason: str, stop_reason: str | int | None = None, error: str | None = None,
               text: str | None = None) -> None:
        """reason: "stop" | "length" | "error"; text: the completion's text, when there is one."""
        self.status = SequenceStatus.FINISHED
        self.finish_reason, self.stop_reason, self.error = reason, stop_reason, error
        if text is not None:
            self.text = text
        self.metrics.finished_time = time.perf_counter()
