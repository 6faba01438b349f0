"""SamplingParams: how one request's tokens are chosen and when its generation stops (vLLM's
offline API shape). Validation raises ValueError/TypeError naming the field."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ascendtile.ops.sampling import SAMPLING_EPS


@dataclass
class SamplingParams:
    """temperature below 1e-5 (vLLM's _SAMPLING_EPS; 0 included) = greedy (top_p/top_k/min_p/seed
    ignored), so a tiny temperature never turns the logits into infs. top_k <= 0 and top_p = 1 and
    min_p = 0 disable those filters. Penalties follow vLLM: repetition divides positive logits
    (multiplies negative ones) of tokens seen in prompt or output; presence/frequency subtract
    from logits of tokens in the output (once / per occurrence). max_tokens counts generated
    tokens; generation also stops at the model's max_model_len. stop strings end generation and
    are cut from the text; stop_token_ids (and EOS unless ignore_eos) end it and stay in
    token_ids but not in the text. logprobs = k returns, per generated token, the log-probs of
    the k most likely tokens plus the sampled one (from the raw model distribution)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    max_tokens: int = 16
    stop: list[str] | str | None = None
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    seed: int | None = None
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logprobs: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        self.stop = list(self.stop or [])
        self.stop_token_ids = [int(t) for t in self.stop_token_ids]
        self.validate()

    def validate(self) -> None:
        """Raise ValueError naming the first invalid field. Runs at construction and again in
        LLM.generate (the dataclass is mutable, so a field may have changed since)."""
        _check(isinstance(self.temperature, (int, float)) and 0 <= self.temperature < math.inf, "temperature",
               "must be finite and >= 0")
        _check(0 < self.top_p <= 1, "top_p", "must be in (0, 1]")
        _check(isinstance(self.top_k, int), "top_k", "must be an int (<= 0 disables)")
        _check(0 <= self.min_p <= 1, "min_p", "must be in [0, 1]")
        _check(isinstance(self.max_tokens, int) and self.max_tokens >= 1, "max_tokens", "must be an int >= 1")
        _check(isinstance(self.stop, list) and all(isinstance(s, str) and s for s in self.stop), "stop",
               "must be a list of non-empty strings")
        _check(self.repetition_penalty > 0, "repetition_penalty", "must be > 0")
        _check(-2 <= self.presence_penalty <= 2, "presence_penalty", "must be in [-2, 2]")
        _check(-2 <= self.frequency_penalty <= 2, "frequency_penalty", "must be in [-2, 2]")
        _check(self.logprobs is None or (isinstance(self.logprobs, int) and self.logprobs >= 0), "logprobs",
               "must be None or an int >= 0")
        _check(self.seed is None or isinstance(self.seed, int), "seed", "must be None or an int")

    @property
    def greedy(self) -> bool:
        return self.temperature < SAMPLING_EPS

    @property
    def needs_penalties(self) -> bool:
        return self.repetition_penalty != 1 or self.presence_penalty != 0 or self.frequency_penalty != 0

    @property
    def needs_filters(self) -> bool:
        return not self.greedy and (self.top_k > 0 or self.top_p < 1 or self.min_p > 0)


def _check(ok: bool, name: str, rule: str) -> None:
    if not ok:
        raise ValueError(f"{name}: {rule}")
