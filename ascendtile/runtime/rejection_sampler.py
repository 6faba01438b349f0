"""RejectionSampler: the tokens a speculative verify step emits, through the sampling and
rejection ops (vLLM's rejection sampler). A sampled sequence with d drafts has 1 + d logits rows:
row j is the target distribution of its output position num_output_tokens + j, given the drafts
before it.

Every row gets its sequence's SamplingParams, as without speculation: penalties (with exact
per-position counts: row j counts the output so far plus drafts 0..j-1, in a per-step copy of
the sequence's TokenCounts rows), then temperature and top-k / top-p / min-p (process_logits).
sample_tokens then gives each row its token with the seed and step it would have without
speculation — greedy rows their argmax (the target argmax of the drafts, and the bonus), sampled
rows a draw used only as the bonus. rejection_greedy_sample decides the greedy sequences;
sampled ones get softmax(processed logits) as the target probabilities, sample_recovered_tokens
and rejection_random_sample (draft probabilities one-hot: the n-gram proposer's q). A draft
position's randomness is (seed, its output position), so a seeded request emits the same tokens
whatever the batch. Logprobs (the model's raw ones, as the Sampler's) are gathered for the
emitted tokens of the sequences that asked.
"""
from __future__ import annotations

import torch

from ascendtile.ops.rejection import rejection_greedy_sample, rejection_random_sample, sample_recovered_tokens
from ascendtile.ops.sampling import (apply_penalties, gather_logprobs, process_logits, sample_tokens,
                                     update_token_counts)
from ascendtile.runtime.sampler import Sampler
from ascendtile.runtime.sampling_batch import SamplingBatch, build_batch
from ascendtile.runtime.sequence import Sequence


class RejectionSampler:
    def __init__(self, sampler: Sampler) -> None:
        self.sampler = sampler  # its seeds and TokenCounts are the requests' (one state, two samplers)
        self.device = sampler.device

    def __call__(self, logits: torch.Tensor, seqs: list[Sequence],
                 drafts: list[list[int]]) -> tuple[list[list[int]], list[list[dict[int, float] | None]]]:
        """logits fp32 [sum(1 + len(d)), vocab] (modified in place): each sequence's draft rows then
        its bonus row. Returns, per sequence, its emitted tokens and their logprobs entries."""
        dev, counts = self.device, self.sampler.counts
        sizes = [len(d) + 1 for d in drafts]
        row_seqs = [seq for seq, size in zip(seqs, sizes) for _ in range(size)]
        batch = build_batch(row_seqs, [self.sampler.seeds[s.seq_id] for s in row_seqs], None, dev)
        steps = torch.tensor([s.num_output_tokens + j for s, size in zip(seqs, sizes) for j in range(size)],
                             dtype=torch.int64).to(dev)
        raw = logits.index_select(0, batch.logprob_index) if batch.logprob_rows else None
        count_rows = None
        if any(s.params.needs_penalties for s in seqs):
            count_rows = [counts.row(s, logits.shape[1]) if s.params.needs_penalties else -1 for s in seqs]
            self._apply_penalties(logits, batch, count_rows, drafts, sizes)
        if batch.process:
            process_logits(logits, batch.temperatures, batch.top_k, batch.top_p, batch.min_p)
        tokens = sample_tokens(logits, batch.temperatures, batch.seeds, steps)

        ends = torch.tensor(sizes, dtype=torch.int64).cumsum(0)
        bonus_rows = (ends - 1).to(dev)
        is_draft = torch.ones(len(row_seqs), dtype=torch.bool)
        is_draft[ends - 1] = False
        draft_rows = is_draft.nonzero().flatten().to(dev)
        cu = torch.tensor([len(d) for d in drafts], dtype=torch.int32).cumsum(0, dtype=torch.int32).to(dev)
        draft_ids = torch.tensor([t for d in drafts for t in d], dtype=torch.int32).to(dev)
        greedy = [s.params.greedy for s in seqs]
        is_greedy = torch.tensor(greedy, dtype=torch.bool).to(dev)
        bonus = tokens.index_select(0, bonus_rows)
        out = rejection_greedy_sample(cu, draft_ids, tokens.index_select(0, draft_rows), bonus, max(sizes) - 1,
                                      None if all(greedy) else is_greedy)
        if not all(greedy):
            probs = torch.softmax(logits.index_select(0, draft_rows), dim=-1)
            seeds, draft_steps = batch.seeds.index_select(0, bonus_rows), steps.index_select(0, draft_rows)
            recovered = sample_recovered_tokens(cu, draft_ids, None, probs, seeds, draft_steps)
            rejection_random_sample(out, cu, draft_ids, None, probs, bonus, recovered, seeds, draft_steps, is_greedy)

        emitted = [[t for t in row if t >= 0] for row in out.tolist()]  # -1 only after a row's tokens
        if count_rows is not None:
            self._count(count_rows, emitted)
        return emitted, self._logprobs(raw, batch, emitted, sizes)

    def _apply_penalties(self, logits: torch.Tensor, batch: SamplingBatch, count_rows: list[int],
                         drafts: list[list[int]], sizes: list[int]) -> None:
        """apply_penalties with each row's own counts: its sequence's TokenCounts row plus the
        drafts before its position, in a [rows, vocab] copy for this step."""
        counts, dev = self.sampler.counts, self.device
        base = torch.tensor([max(r, 0) for r, size in zip(count_rows, sizes) for _ in range(size)],
                            dtype=torch.int64).to(dev)
        output_counts = counts.output_counts.index_select(0, base)
        prompt_mask = counts.prompt_mask.index_select(0, base)
        rows, ids, start = [], [], 0
        for r, d, size in zip(count_rows, drafts, sizes):
            if r >= 0:
                for j in range(1, size):  # row start + j has seen drafts 0..j-1
                    rows += [start + j] * j
                    ids += d[:j]
            start += size
        if rows:
            output_counts.index_put_((torch.tensor(rows).to(dev), torch.tensor(ids).to(dev)),
                                     torch.ones(len(rows), dtype=torch.int32, device=dev), accumulate=True)
        step_rows = [row if r >= 0 else -1 for row, r in
                     enumerate(r for r, size in zip(count_rows, sizes) for _ in range(size))]
        apply_penalties(logits, output_counts, prompt_mask, torch.tensor(step_rows, dtype=torch.int32).to(dev),
                        batch.repetition, batch.frequency, batch.presence)

    def _count(self, count_rows: list[int], emitted: list[list[int]]) -> None:
        """Add the emitted tokens to the persistent counts, one column of tokens per call (the op
        takes distinct rows)."""
        for col in range(max(len(e) for e in emitted)):
            rows = [r if r >= 0 and col < len(e) else -1 for r, e in zip(count_rows, emitted)]
            ids = [e[col] if col < len(e) else 0 for e in emitted]
            update_token_counts(self.sampler.counts.output_counts,
                                torch.tensor(rows, dtype=torch.int32).to(self.device),
                                torch.tensor(ids, dtype=torch.int32).to(self.device))

    def _logprobs(self, raw: torch.Tensor | None, batch: SamplingBatch, emitted: list[list[int]],
                  sizes: list[int]) -> list[list[dict[int, float] | None]]:
        """Per sequence, a logprobs entry per emitted token (None entries when it did not ask)."""
        out: list[list[dict[int, float] | None]] = [[None] * len(e) for e in emitted]
        if raw is None:
            return out
        where = {row: i for i, row in enumerate(batch.logprob_rows)}  # row -> its row of raw
        token_of_raw = [0] * len(batch.logprob_rows)
        picked: list[tuple[int, int, int]] = []  # (sequence, emitted index, row of raw)
        start = 0
        for s, (e, size) in enumerate(zip(emitted, sizes)):
            if start in where:
                for j, token in enumerate(e):
                    token_of_raw[where[start + j]] = token
                    picked.append((s, j, where[start + j]))
            start += size
        dev = self.device
        counts = [batch.logprob_counts[i] for _, _, i in picked]
        values, ids = gather_logprobs(raw, torch.tensor([i for _, _, i in picked], dtype=torch.int32).to(dev),
                                     torch.tensor(token_of_raw, dtype=torch.int32).to(dev), max(counts))
        for (s, j, _), n, v, t in zip(picked, counts, values.tolist(), ids.tolist()):
            entry = dict(zip(t[1:1 + n], v[1:1 + n]))
            entry[t[0]] = v[0]  # column 0: the emitted token
            out[s][j] = entry
        return out
