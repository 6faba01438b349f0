"""SpeculativeConfig: how draft tokens are proposed for speculative decoding, in vLLM's field
names. Only the n-gram (prompt lookup) method is supported; it needs no draft model.

As in vLLM: `method` and `num_speculative_tokens` have no usable default (vLLM's num_speculative_tokens
is required for ngram, and its method without a draft model is not ngram), so both must be given;
prompt_lookup_min and prompt_lookup_max are 5 when neither is given, and each defaults to the other
when only one is. vLLM's older spelling "[ngram]" is read as "ngram".
"""
from __future__ import annotations

from dataclasses import dataclass

from ascendtile.compilation.config import check_fields

SUPPORTED_METHODS = ("ngram",)
METHOD_ALIASES = {"[ngram]": "ngram"}
DEFAULT_PROMPT_LOOKUP = 5  # vLLM's prompt_lookup_min = prompt_lookup_max when neither is given


def _check_int(name: str, value: object, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"speculative_config.{name}: expected an int, got {value!r}")
    if value < low:
        raise ValueError(f"speculative_config.{name}: must be >= {low}, got {value}")


@dataclass(kw_only=True)
class SpeculativeConfig:
    """method: "ngram". num_speculative_tokens: draft tokens proposed per step (k >= 1).
    prompt_lookup_min / prompt_lookup_max: the n-gram lengths the proposer looks up, longest
    first (1 <= min <= max); None resolves as described in the module docstring."""

    method: str
    num_speculative_tokens: int
    prompt_lookup_max: int | None = None
    prompt_lookup_min: int | None = None

    def __post_init__(self) -> None:
        method = METHOD_ALIASES.get(self.method, self.method) if isinstance(self.method, str) else self.method
        if method not in SUPPORTED_METHODS:
            raise ValueError(f"speculative_config.method: {self.method!r} is not supported; "
                             f"supported: {list(SUPPORTED_METHODS)}")
        self.method = method
        _check_int("num_speculative_tokens", self.num_speculative_tokens, 1)
        for name in ("prompt_lookup_min", "prompt_lookup_max"):  # checked as given, before one fills the other
            if getattr(self, name) is not None:
                _check_int(name, getattr(self, name), 1)
        if self.prompt_lookup_min is None and self.prompt_lookup_max is None:
            self.prompt_lookup_min = self.prompt_lookup_max = DEFAULT_PROMPT_LOOKUP
        elif self.prompt_lookup_min is None:
            self.prompt_lookup_min = self.prompt_lookup_max
        elif self.prompt_lookup_max is None:
            self.prompt_lookup_max = self.prompt_lookup_min
        if self.prompt_lookup_max < self.prompt_lookup_min:
            raise ValueError(f"speculative_config.prompt_lookup_max: must be >= prompt_lookup_min "
                             f"({self.prompt_lookup_min}), got {self.prompt_lookup_max}")

    @classmethod
    def from_user(cls, value: "SpeculativeConfig | dict | None") -> "SpeculativeConfig | None":
        """What LLM(speculative_config=...) will accept: a config, a dict of its fields, or None
        (no speculative decoding, as in vLLM)."""
        if value is None or isinstance(value, cls):
            return value
        if isinstance(value, dict):
            check_fields("speculative_config", value, cls)
            missing = [name for name in ("method", "num_speculative_tokens") if name not in value]
            if missing:
                raise ValueError(f"speculative_config.{missing[0]}: required (no default)")
            return cls(**value)
        raise TypeError(f"speculative_config: expected a SpeculativeConfig, dict or None, got {type(value).__name__}")
