"""Sampler: one token per row of fp32 logits [N, vocab] through the sampling ops, on the logits'
device (Triton kernels on NPU/CUDA, the references on CPU): apply_penalties from the persistent
TokenCounts, process_logits (temperature, top-k / top-p / min-p), sample_tokens (seeded draws and
greedy rows in one call), update_token_counts, and gather_logprobs for the rows that asked. The
logits are modified in place (the model hands over a fresh tensor each step). Nothing between
the model and the one copy of the sampled ids to the host reads device values, so the step
could be captured whole.

Randomness: a row's draw depends only on its request's seed and its step (the number of output
tokens so far), never on the batch. Seeded requests use their seed; an unseeded one gets a seed
drawn from the engine's generator when it arrives, so a run with a fixed engine seed repeats
exactly, and a request preempted and recomputed draws the tokens it drew before.

The engine tells the sampler when a request arrives (add), is preempted (suspend: its counts
row is freed and refilled when it is sampled again) and finishes (release). Sequences are only
read; the engine appends the sampled tokens.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ascendtile.ops.sampling import apply_penalties, gather_logprobs, process_logits, sample_tokens
from ascendtile.runtime.sampling_batch import SamplingBatch, build_batch
from ascendtile.runtime.sequence import Sequence
from ascendtile.runtime.token_counts import TokenCounts

INT64_MIN, INT64_SPAN = -2**63, 2**64


@dataclass
class SamplerOutput:
    token_ids: list[int]
    logprobs: list[dict[int, float] | None]  # per row: {token_id: logprob} (top-n + sampled), or None


class Sampler:
    def __init__(self, device: torch.device, seed: int = 0) -> None:
        self.device = device
        self.generator = torch.Generator().manual_seed(seed)  # draws the unseeded requests' seeds
        self.seeds: dict[int, int] = {}  # seq_id -> int64 seed
        self.counts = TokenCounts(device)
        self.batch: SamplingBatch | None = None  # the last batch composition's parameters

    def add(self, seq: Sequence) -> None:
        """A request arrived: fix its seed."""
        seed = seq.params.seed
        if seed is None:
            seed = int(torch.randint(INT64_MIN, -INT64_MIN - 1, (), generator=self.generator))
        self.seeds[seq.seq_id] = (seed - INT64_MIN) % INT64_SPAN + INT64_MIN  # any int, wrapped to int64

    def suspend(self, seq: Sequence) -> None:
        """Preempted: free its counts row (refilled from its tokens when it is sampled again)."""
        self.counts.release(seq)
        self.batch = None

    def release(self, seq: Sequence) -> None:
        """Finished: forget it."""
        self.suspend(seq)
        self.seeds.pop(seq.seq_id, None)

    def __call__(self, logits: torch.Tensor, seqs: list[Sequence]) -> SamplerOutput:
        batch = self._batch(seqs, logits.shape[1])
        steps = torch.tensor([s.num_output_tokens for s in seqs], dtype=torch.int64).to(self.device)
        # vLLM's default logprobs are the model's: copy those rows before anything changes them
        raw = logits.index_select(0, batch.logprob_index) if batch.logprob_rows else None
        if batch.count_rows is not None:
            apply_penalties(logits, self.counts.output_counts, self.counts.prompt_mask, batch.count_rows,
                            batch.repetition, batch.frequency, batch.presence)
        if batch.process:
            process_logits(logits, batch.temperatures, batch.top_k, batch.top_p, batch.min_p)
        tokens = sample_tokens(logits, batch.temperatures, batch.seeds, steps)
        if batch.count_rows is not None:
            self.counts.update(batch.count_rows, tokens)
        logprobs = self._logprobs(raw, tokens, batch) if raw is not None else [None] * len(seqs)
        return SamplerOutput(tokens.tolist(), logprobs)

    def _batch(self, seqs: list[Sequence], vocab: int) -> SamplingBatch:
        seq_ids = tuple(s.seq_id for s in seqs)
        if self.batch is None or self.batch.seq_ids != seq_ids:
            rows = ([self.counts.row(s, vocab) if s.params.needs_penalties else -1 for s in seqs]
                    if any(s.params.needs_penalties for s in seqs) else None)
            self.batch = build_batch(seqs, [self.seeds[i] for i in seq_ids], rows, self.device)
        return self.batch

    @staticmethod
    def _logprobs(raw: torch.Tensor, tokens: torch.Tensor, batch: SamplingBatch) -> list[dict[int, float] | None]:
        values, ids = gather_logprobs(raw, batch.logprob_positions, tokens.index_select(0, batch.logprob_index),
                                      max(batch.logprob_counts))
        values, ids = values.tolist(), ids.tolist()
        out: list[dict[int, float] | None] = [None] * len(tokens)
        for i, (row, n) in enumerate(zip(batch.logprob_rows, batch.logprob_counts)):
            entry = dict(zip(ids[i][1:1 + n], values[i][1:1 + n]))
            entry[ids[i][0]] = values[i][0]  # column 0: the sampled token
            out[row] = entry
        return out
