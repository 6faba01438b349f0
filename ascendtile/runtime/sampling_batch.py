"""SamplingBatch: the per-row sampling parameters of one batch composition as device tensors,
in the dtypes the sampling ops take. Built from the sequences' SamplingParams with three small
host-to-device copies; the Sampler keeps the last one and rebuilds only when the batch's
sequences change (in a steady decode the same batch is sampled step after step).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ascendtile.runtime.sequence import Sequence

INT32_MAX = 2**31 - 1


@dataclass
class SamplingBatch:
    seq_ids: tuple[int, ...]
    temperatures: torch.Tensor  # fp32 [N]; 0 = greedy (every SamplingParams.greedy row, whatever its temperature)
    top_k: torch.Tensor  # int32 [N]; 0 = off
    top_p: torch.Tensor  # fp32 [N]
    min_p: torch.Tensor  # fp32 [N]
    seeds: torch.Tensor  # int64 [N]
    process: bool  # some row is scaled by a temperature or filtered: process_logits has work
    count_rows: torch.Tensor | None  # int32 [N], the TokenCounts row (-1: none); None: no row has penalties
    repetition: torch.Tensor  # fp32 [N]
    frequency: torch.Tensor  # fp32 [N]
    presence: torch.Tensor  # fp32 [N]
    logprob_rows: list[int]  # rows that asked for logprobs, ascending
    logprob_counts: list[int]  # how many top logprobs each of them asked for
    logprob_index: torch.Tensor  # int64 [n]: logprob_rows on the device
    logprob_positions: torch.Tensor  # int32 [n]: 0..n-1, the rows of the copied raw logits


def build_batch(seqs: list[Sequence], seeds: list[int], count_rows: list[int] | None,
                device: torch.device) -> SamplingBatch:
    """seeds: each row's int64 seed; count_rows: each row's TokenCounts row (-1: no penalties),
    or None when no row has penalties."""
    params = [s.params for s in seqs]
    # greedy rows get 0, so the ops decide as SamplingParams.greedy did, not on the fp32 rounding
    temperatures = [0.0 if p.greedy else p.temperature for p in params]
    floats = torch.tensor([temperatures, [p.top_p for p in params], [p.min_p for p in params],
                           [p.repetition_penalty for p in params], [p.frequency_penalty for p in params],
                           [p.presence_penalty for p in params]], dtype=torch.float32).to(device)
    # top_k <= 0 disables (SamplingParams); beyond int32 it keeps the whole vocabulary anyway
    top_k = [min(max(p.top_k, 0), INT32_MAX) for p in params]
    ints = torch.tensor([top_k, count_rows or [-1] * len(seqs)], dtype=torch.int32).to(device)
    asked = [(row, p.logprobs) for row, p in enumerate(params) if p.logprobs is not None]
    rows = [row for row, _ in asked]
    return SamplingBatch(
        tuple(s.seq_id for s in seqs), floats[0], ints[0], floats[1], floats[2],
        torch.tensor(seeds, dtype=torch.int64).to(device),
        any(not p.greedy and (p.temperature != 1 or p.needs_filters) for p in params),
        ints[1] if count_rows is not None else None, floats[3], floats[4], floats[5],
        rows, [k for _, k in asked], torch.tensor(rows, dtype=torch.int64).to(device),
        torch.arange(len(rows), dtype=torch.int32, device=device))
