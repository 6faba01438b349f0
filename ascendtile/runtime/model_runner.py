"""ModelRunner: turns a scheduled batch into the flat token batch and AttentionMetadata, runs the
model (decode batches through the GraphRunner), and samples on the device.

Host-side preparation is per sequence (list slicing, one padded block-table row each), never
per token: positions and slot mappings are computed with tensor ops. It only reads sequences;
the engine applies the step's results to them. The model is a RuntimeModel
(runtime/model_interface.py): called for hidden states, then compute_logits on the sampled rows.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ascendtile.model.attention_metadata import AttentionMetadata
from ascendtile.runtime.graph_runner import GraphRunner
from ascendtile.runtime.model_interface import RuntimeModel
from ascendtile.runtime.sampler import Sampler, SamplerOutput
from ascendtile.runtime.scheduler import ScheduledBatch
from ascendtile.runtime.sequence import Sequence


@dataclass
class StepInputs:
    input_ids: torch.Tensor  # [T] int64
    positions: torch.Tensor  # [T] int64
    meta: AttentionMetadata
    sample_rows: torch.Tensor  # [N] int64: row of each sampled sequence's last token
    sample_seqs: list[Sequence]


class ModelRunner:
    def __init__(self, model: RuntimeModel, block_size: int, num_blocks: int, device: torch.device, sampler: Sampler,
                 graph_runner: GraphRunner | None) -> None:
        self.model, self.block_size, self.num_blocks, self.device = model, block_size, num_blocks, device
        self.sampler, self.graph_runner = sampler, graph_runner

    def prepare(self, batch: ScheduledBatch) -> StepInputs:
        seqs, counts = batch.seqs, batch.num_new_tokens
        starts = [s.num_computed_tokens for s in seqs]
        ids: list[int] = []
        for seq, start, n in zip(seqs, starts, counts):
            ids += seq.token_ids[start:start + n]
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
        sampled = [i for i, (seq, end) in enumerate(zip(seqs, ends)) if end == len(seq)]
        dev = self.device
        meta = AttentionMetadata(slots.to(dev), tables.to(dev), cu.to(dev),
                                 torch.tensor(ends, dtype=torch.int32).to(dev), max(counts), max(ends))
        positions = positions.to(dev)
        # Once per step; the model's layers then skip the per-op checks.
        meta.validate(positions, self.block_size, self.num_blocks)
        return StepInputs(torch.tensor(ids, dtype=torch.int64).to(dev), positions, meta,
                          (cu[1:][sampled].long() - 1).to(dev), [seqs[i] for i in sampled])

    @torch.inference_mode()
    def execute(self, batch: ScheduledBatch) -> tuple[list[Sequence], SamplerOutput | None]:
        """Run one step; returns the sequences that got a new token and their samples (None when
        every sequence only advanced its prefill)."""
        inputs = self.prepare(batch)
        if batch.is_decode and self.graph_runner is not None and self.graph_runner.fits(len(batch)):
            hidden = self.graph_runner.run(inputs.input_ids, inputs.positions, inputs.meta)
        else:
            hidden = self.model(inputs.input_ids, inputs.positions, inputs.meta)
        if not inputs.sample_seqs:
            return [], None
        logits = self.model.compute_logits(hidden[inputs.sample_rows])
        return inputs.sample_seqs, self.sampler(logits, inputs.sample_seqs)
