"""ModelRunner: turns a scheduled batch into the flat token batch and AttentionMetadata, runs the
model (decode batches through the GraphRunner), and samples on the device.

Host-side preparation is per sequence (list slicing, one padded block-table row each), never
per token: positions and slot mappings are computed with tensor ops. It only reads sequences;
the engine applies the step's results to them. The model is a RuntimeModel
(runtime/model_interface.py): called for hidden states, then compute_logits on the sampled rows.

Speculative decoding: a sequence's draft tokens follow its chunk in the flat batch (q_len
1 + drafts; unified attention takes any q_len per sequence, causal within it), their KV is
written at the positions after the sequence's tokens, and the logits of every draft position and
the bonus position are sampled — by the RejectionSampler when any sampled sequence has drafts,
by the Sampler otherwise.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ascendtile.model.attention_metadata import AttentionMetadata
from ascendtile.runtime.graph_runner import GraphRunner
from ascendtile.runtime.model_interface import RuntimeModel
from ascendtile.runtime.rejection_sampler import RejectionSampler
from ascendtile.runtime.sampler import Sampler
from ascendtile.runtime.scheduler import ScheduledBatch
from ascendtile.runtime.sequence import Sequence


@dataclass
class StepInputs:
    input_ids: torch.Tensor  # [T] int64
    positions: torch.Tensor  # [T] int64
    meta: AttentionMetadata
    sample_rows: torch.Tensor  # [R] int64: each sampled sequence's draft rows and its last row, in order
    sample_seqs: list[Sequence]
    sample_drafts: list[list[int]]  # each sampled sequence's draft tokens (its rows: drafts + 1)


@dataclass
class StepOutput:
    """Per sampled sequence, the tokens it emits this step (one without drafts; the accepted
    drafts then the recovered or bonus token with them) and, when it asked, their logprobs."""

    seqs: list[Sequence]
    token_ids: list[list[int]]
    logprobs: list[list[dict[int, float] | None]]


class ModelRunner:
    def __init__(self, model: RuntimeModel, block_size: int, num_blocks: int, device: torch.device, sampler: Sampler,
                 graph_runner: GraphRunner | None) -> None:
        self.model, self.block_size, self.num_blocks, self.device = model, block_size, num_blocks, device
        self.sampler, self.graph_runner = sampler, graph_runner
        self.rejection_sampler = RejectionSampler(sampler)

    def prepare(self, batch: ScheduledBatch) -> StepInputs:
        seqs, drafts = batch.seqs, batch.draft_token_ids
        starts = [s.num_computed_tokens for s in seqs]
        ids: list[int] = []
        for seq, start, n, d in zip(seqs, starts, batch.num_new_tokens, drafts):
            ids += seq.token_ids[start:start + n]
            ids += d
        counts = [n + len(d) for n, d in zip(batch.num_new_tokens, drafts)]
        count_t = torch.tensor(counts, dtype=torch.int32)
        start_t = torch.tensor(starts, dtype=torch.int64)
        cu = torch.zeros(len(seqs) + 1, dtype=torch.int32)
        torch.cumsum(count_t, 0, out=cu[1:])
        if batch.is_decode:
            seq_idx, positions = torch.arange(len(seqs)), start_t
        else:
            # row -> its sequence (searchsorted: repeat_interleave costs ~20 ms on CPU torch)
            seq_idx = torch.searchsorted(cu[1:], torch.arange(len(ids), dtype=torch.int32), right=True)
            positions = torch.arange(len(ids)) - cu[:-1].long()[seq_idx] + start_t[seq_idx]
        width = max(len(s.block_table) for s in seqs)
        tables = torch.tensor([s.block_table + [-1] * (width - len(s.block_table)) for s in seqs], dtype=torch.int32)
        slots = tables[seq_idx, positions // self.block_size].long() * self.block_size + positions % self.block_size
        ends = [start + n for start, n in zip(starts, counts)]
        sampled = [i for i, (seq, end, d) in enumerate(zip(seqs, ends, drafts)) if end - len(d) == len(seq)]
        dev = self.device
        meta = AttentionMetadata(slots.to(dev), tables.to(dev), cu.to(dev),
                                 torch.tensor(ends, dtype=torch.int32).to(dev), max(counts), max(ends))
        positions = positions.to(dev)
        # Once per step; the model's layers then skip the per-op checks.
        meta.validate(positions, self.block_size, self.num_blocks)
        cu_list = cu.tolist()
        rows = [row for i in sampled for row in range(cu_list[i + 1] - 1 - len(drafts[i]), cu_list[i + 1])]
        return StepInputs(torch.tensor(ids, dtype=torch.int64).to(dev), positions, meta,
                          torch.tensor(rows, dtype=torch.int64).to(dev), [seqs[i] for i in sampled],
                          [drafts[i] for i in sampled])

    @torch.inference_mode()
    def execute(self, batch: ScheduledBatch) -> StepOutput:
        """Run one step; returns the sequences that emit tokens and their tokens (no sequence when
        every sequence only advanced its prefill)."""
        inputs = self.prepare(batch)
        if batch.is_decode and self.graph_runner is not None and self.graph_runner.fits(len(batch)):
            hidden = self.graph_runner.run(inputs.input_ids, inputs.positions, inputs.meta)
        else:
            hidden = self.model(inputs.input_ids, inputs.positions, inputs.meta)
        seqs = inputs.sample_seqs
        if not seqs:
            return StepOutput([], [], [])
        logits = self.model.compute_logits(hidden[inputs.sample_rows])
        if any(inputs.sample_drafts):
            tokens, logprobs = self.rejection_sampler(logits, seqs, inputs.sample_drafts)
            return StepOutput(seqs, tokens, logprobs)
        out = self.sampler(logits, seqs)
        return StepOutput(seqs, [[t] for t in out.token_ids], [[lp] for lp in out.logprobs])
