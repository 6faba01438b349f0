"""NgramProposer: draft tokens by prompt lookup (vLLM's n-gram proposer). For one sequence's
history (prompt + output tokens so far), the last n tokens are looked up earlier in the history,
n from prompt_lookup_max down to prompt_lookup_min; the first n that occurs wins, and the drafts
are up to k tokens that followed it (fewer when the history ends first; [] when no n occurs).

Match rule, as vLLM's (v1/spec_decode/ngram_proposer.py: its KMP scan keeps the occurrence
of the longest n that lies earliest in the history): the longest n, then its EARLIEST
occurrence. The earliest one has the most history after it, so the drafts are rarely cut short
by the end of the history, and acceptance rates compare with vLLM's (the same drafts as vLLM's
function on 9000 random histories, checked 2026-11-25 with vLLM's venv). An occurrence may overlap
the suffix itself (not be it): in a run "a a a a", the last "a a" is found at the start.

The lookup keeps the end positions of the occurrences of the last n tokens and narrows them with
one vectorised compare per n = 1, 2, ..., prompt_lookup_max (stopping when none is left):
O(len) for n = 1, then only over the survivors, which shrink quickly on real text (the worst
case, one id repeated, is prompt_lookup_max passes over the whole history).

Measured 2026-11-25 (CPU with avx512_bf16 and avx2, 2 shared cores, numpy 2.2.6), ms per
sequence, k = 5, prompt_lookup 1..5, history as a Python list (copied to an array first) / as
an int64 ndarray (no copy):
  history     random over 32k ids    random over 4 ids    one id repeated (worst case)
   1k tokens     0.025 / 0.003          0.043 / 0.019          0.054 / 0.032
   4k tokens     0.088 / 0.004          0.122 / 0.028          0.157 / 0.073
  16k tokens     0.33  / 0.009          0.43  / 0.058          0.56  / 0.23
against a decode step of ~30-50 ms. The list copy dominates on real text: a caller proposing for
many long sequences every step should keep each history in a growing ndarray.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ascendtile.runtime.speculative_config import SpeculativeConfig


class NgramProposer:
    """Drafts from config: k = num_speculative_tokens, n in [prompt_lookup_min, prompt_lookup_max]."""

    def __init__(self, config: SpeculativeConfig) -> None:
        if not isinstance(config, SpeculativeConfig):
            raise TypeError(f"config: expected a SpeculativeConfig, got {type(config).__name__}")
        self.k = config.num_speculative_tokens
        self.min_n = config.prompt_lookup_min
        self.max_n = config.prompt_lookup_max

    def propose(self, token_ids: Sequence[int] | np.ndarray, max_drafts: int | None = None) -> list[int]:
        """token_ids: one sequence's history (1-D). Up to min(k, max_drafts) draft tokens
        (max_drafts: e.g. the room left before max_model_len; None = k)."""
        if isinstance(token_ids, np.ndarray):
            if token_ids.ndim != 1:
                raise ValueError(f"token_ids: expected one sequence's 1-D history, got shape {token_ids.shape}")
            tokens = token_ids
        else:  # fromiter with a count: the fastest copy of a list of ints (~0.6x np.asarray's time)
            tokens = np.fromiter(token_ids, dtype=np.int64, count=len(token_ids))
        k = self.k if max_drafts is None else min(self.k, max_drafts)
        total = tokens.shape[0]
        if k <= 0 or total <= self.min_n:  # an occurrence other than the suffix needs total > n
            return []
        # ends: the end positions (ascending, before the last position) of the occurrences of the last n tokens
        ends = np.flatnonzero(tokens[:-1] == tokens[-1])
        found = -1
        for n in range(1, min(self.max_n, total - 1) + 1):
            if n > 1:
                ends = ends[ends >= n - 1]
                ends = ends[tokens[ends - (n - 1)] == tokens[total - n]]
            if ends.size == 0:
                break
            if n >= self.min_n:
                found = int(ends[0])  # ascending: the earliest occurrence of the longest n so far
        if found < 0:
            return []
        return tokens[found + 1:found + 1 + k].tolist()

    def propose_batch(self, token_ids: Sequence[Sequence[int] | np.ndarray],
                      max_drafts: Sequence[int]) -> list[list[int]]:
        """propose() for each sequence: token_ids[i] its history, max_drafts[i] its cap."""
        if len(max_drafts) != len(token_ids):
            raise ValueError(f"max_drafts: {len(max_drafts)} caps for {len(token_ids)} sequences")
        return [self.propose(ids, cap) for ids, cap in zip(token_ids, max_drafts)]
