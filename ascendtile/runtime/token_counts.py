"""TokenCounts: the penalty state of the running requests that use penalties, on the logits'
device — output_counts int32 [slots, vocab] (occurrences in the output) and prompt_mask int8
[slots, vocab] (1 = in the prompt), the tables apply_penalties reads.

A request takes a row the first time it is sampled after admission; the row is filled once from
its prompt and the outputs it already has (non-empty after a preemption, so a recomputed request
sees the counts it saw before), then update_token_counts adds each sampled token on the device.
The row goes back to the free list when the request finishes or is preempted. The tables are
allocated at the first use (the vocabulary comes with the logits) and double when full.
"""
from __future__ import annotations

import torch

from ascendtile.ops.sampling import update_token_counts
from ascendtile.runtime.sequence import Sequence

INITIAL_SLOTS = 8


class TokenCounts:
    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.output_counts = torch.zeros(0, 0, dtype=torch.int32, device=device)
        self.prompt_mask = torch.zeros(0, 0, dtype=torch.int8, device=device)
        self.rows: dict[int, int] = {}  # seq_id -> its row
        self.free: list[int] = []

    def row(self, seq: Sequence, vocab: int) -> int:
        """seq's row, taken and filled now if it has none."""
        row = self.rows.get(seq.seq_id)
        if row is None:
            row = self.rows[seq.seq_id] = self._take(vocab)
            self._fill(row, seq.prompt_token_ids, seq.output_token_ids)
        return row

    def release(self, seq: Sequence) -> None:
        row = self.rows.pop(seq.seq_id, None)
        if row is not None:
            self.free.append(row)

    def update(self, count_rows: torch.Tensor, token_ids: torch.Tensor) -> None:
        """Count each row's sampled token (count_rows -1: a row without penalties)."""
        update_token_counts(self.output_counts, count_rows, token_ids)

    def _take(self, vocab: int) -> int:
        if not self.free:
            self._grow(vocab)
        return self.free.pop()

    def _grow(self, vocab: int) -> None:
        old = self.output_counts.shape[0]
        size = max(INITIAL_SLOTS, 2 * old)
        counts = torch.zeros(size, vocab, dtype=torch.int32, device=self.device)
        mask = torch.zeros(size, vocab, dtype=torch.int8, device=self.device)
        if old:
            counts[:old], mask[:old] = self.output_counts, self.prompt_mask
        self.output_counts, self.prompt_mask = counts, mask
        self.free += range(size - 1, old - 1, -1)  # lowest row first

    def _fill(self, row: int, prompt: list[int], output: list[int]) -> None:
        vocab = self.output_counts.shape[1]
        ids = torch.tensor(prompt + output, dtype=torch.int64).to(self.device)
        self.prompt_mask[row].zero_().index_fill_(0, ids[:len(prompt)], 1)
        self.output_counts[row].copy_(torch.bincount(ids[len(prompt):], minlength=vocab))
