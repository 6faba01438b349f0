"""Drafter: the scheduler's source of draft tokens — the NgramProposer over each running
sequence's history (prompt + output), kept in one int64 array per sequence sized to its max_len
at the first proposal and filled with only the tokens appended since (the proposer's author
measured a list copy per proposal at ~100x the lookup on long histories).

Drafts depend only on the history and the room the sequence has left, never on the batch, so a
seeded request proposes (and so draws) the same way alone, batched and after preemption."""
from __future__ import annotations

import numpy as np

from ascendtile.runtime.ngram_proposer import NgramProposer
from ascendtile.runtime.sequence import Sequence
from ascendtile.runtime.speculative_config import SpeculativeConfig


class Drafter:
    def __init__(self, config: SpeculativeConfig) -> None:
        self.proposer = NgramProposer(config)
        self.num_speculative_tokens = config.num_speculative_tokens
        self.histories: dict[int, tuple[np.ndarray, int]] = {}  # seq_id -> (its tokens' array, tokens filled)

    def propose(self, seq: Sequence) -> list[int]:
        """Drafts to verify with seq's newest token: at most num_speculative_tokens, and at most
        the room before max_len less the one token every step emits (so every emitted token fits)."""
        room = seq.max_len - len(seq) - 1
        if room <= 0:
            return []
        history, filled = self.histories.get(seq.seq_id, (None, 0))
        if history is None:
            history = np.empty(seq.max_len, dtype=np.int64)
        total = len(seq)
        history[filled:total] = seq.token_ids[filled:total]
        self.histories[seq.seq_id] = (history, total)
        return self.proposer.propose(history[:total], room)

    def release(self, seq: Sequence) -> None:
        """seq finished: drop its history."""
        self.histories.pop(seq.seq_id, None)
