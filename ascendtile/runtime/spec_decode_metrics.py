"""SpecDecodeMetrics: how speculative decoding fared — vLLM's counters (num_drafts: verify
steps of one sequence that carried drafts; num_draft_tokens; num_accepted_tokens) and the two
figures it reports from them."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class SpecDecodeMetrics:
    num_drafts: int = 0  # (sequence, step) pairs that verified >= 1 draft token
    num_draft_tokens: int = 0  # draft tokens proposed and verified
    num_accepted_tokens: int = 0  # of those, accepted by the rejection sampler (before stop conditions cut)

    def record(self, num_draft_tokens: int, num_accepted_tokens: int) -> None:
        """One sequence's verify step: its draft count and how many of them were accepted."""
        self.num_drafts += 1
        self.num_draft_tokens += num_draft_tokens
        self.num_accepted_tokens += num_accepted_tokens

    def since(self, earlier: SpecDecodeMetrics) -> SpecDecodeMetrics:
        """The counts added after `earlier` (a copy of these counters taken then)."""
        return SpecDecodeMetrics(self.num_drafts - earlier.num_drafts, self.num_draft_tokens - earlier.num_draft_tokens,
                                 self.num_accepted_tokens - earlier.num_accepted_tokens)

    @property
    def acceptance_rate(self) -> float:
        """Accepted / drafted tokens (0 before any draft)."""
        return self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else 0.0

    @property
    def mean_acceptance_length(self) -> float:
        """Tokens emitted per verify step of a sequence: 1 + accepted / num_drafts (vLLM's figure;
        the 1 is the recovered or bonus token)."""
        return 1.0 + self.num_accepted_tokens / self.num_drafts if self.num_drafts else 0.0

    def describe(self) -> str:
        return (f"speculative decoding: {self.num_draft_tokens} drafted, {self.num_accepted_tokens} accepted "
                f"(acceptance rate {self.acceptance_rate:.1%}, mean acceptance length "
                f"{self.mean_acceptance_length:.2f} over {self.num_drafts} verify steps)")
