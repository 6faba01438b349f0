"""Sampler: one batched pass on the logits' device from fp32 logits [N, vocab] to one token per
row — penalties, greedy argmax, temperature, top-k / top-p / min-p, seeded sampling, logprobs.

Sampling uses the exponential-race form argmax(p / E) with E ~ Exp(1), equal in distribution to
a categorical draw. Rows with a seed draw E from their own generator (seeded once per request),
so a seeded request gets the same tokens whatever batch it runs in. Work a batch does not need
(penalties, filters, logprobs) is skipped entirely. Sequences are only read (params, prompt
and output ids); the engine appends the sampled tokens.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ascendkit.runtime.sequence import Sequence


@dataclass
class SamplerOutput:
    token_ids: list[int]
    logprobs: list[dict[int, float] | None]  # per row: {token_id: logprob} (top-k + sampled), or None


class Sampler:
    def __init__(self, device: torch.device, seed: int = 0) -> None:
        self.device = device
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(seed)
        self.seq_generators: dict[int, torch.Generator] = {}

    def release(self, seq: Sequence) -> None:
        self.seq_generators.pop(seq.seq_id, None)

    def __call__(self, logits: torch.Tensor, seqs: list[Sequence]) -> SamplerOutput:
        params = [s.params for s in seqs]
        raw_logprobs = (torch.log_softmax(logits, dim=-1) if any(p.logprobs is not None for p in params) else None)
        if any(p.needs_penalties for p in params):
            logits = self._apply_penalties(logits, seqs)
        greedy = [p.greedy for p in params]
        if all(greedy):
            tokens = logits.argmax(dim=-1)
        else:
            tokens = self._sample(logits, seqs, greedy)
        token_list = tokens.tolist()
        return SamplerOutput(token_list, self._logprobs(raw_logprobs, tokens, params) if raw_logprobs is not None
                             else [None] * len(seqs))

    def _tensor(self, values: list, dtype: torch.dtype) -> torch.Tensor:
        return torch.tensor(values, dtype=dtype).to(self.device, non_blocking=True)

    def _apply_penalties(self, logits: torch.Tensor, seqs: list[Sequence]) -> torch.Tensor:
        """vLLM semantics: repetition over prompt + output tokens, presence/frequency over output."""
        vocab = logits.shape[1]
        def counts(lists: list[list[int]]) -> torch.Tensor:
            width = max(1, max(len(ids) for ids in lists))
            ids = self._tensor([ids + [vocab] * (width - len(ids)) for ids in lists], torch.int64)
            out = torch.zeros(len(lists), vocab + 1, device=logits.device, dtype=logits.dtype)
            return out.scatter_add_(1, ids, torch.ones_like(ids, dtype=logits.dtype))[:, :vocab]
        out_counts = counts([s.output_token_ids for s in seqs])
        seen = (counts([s.prompt_token_ids for s in seqs]) + out_counts) > 0
        rep = self._tensor([s.params.repetition_penalty for s in seqs], logits.dtype)[:, None]
        logits = torch.where(seen, torch.where(logits > 0, logits / rep, logits * rep), logits)
        freq = self._tensor([s.params.frequency_penalty for s in seqs], logits.dtype)[:, None]
        pres = self._tensor([s.params.presence_penalty for s in seqs], logits.dtype)[:, None]
        return logits - freq * out_counts - pres * (out_counts > 0).to(logits.dtype)

    def _sample(self, logits: torch.Tensor, seqs: list[Sequence], greedy: list[bool]) -> torch.Tensor:
        params = [s.params for s in seqs]
        argmax = logits.argmax(dim=-1)
        temps = self._tensor([1.0 if g else p.temperature for g, p in zip(greedy, params)], logits.dtype)
        scaled = logits / temps[:, None]
        if any(p.needs_filters for p in params):
            scaled = self._filter(scaled, params)
        probs = torch.softmax(scaled, dim=-1)
        noise = torch.empty_like(probs).exponential_(generator=self.generator)
        for row, seq in enumerate(seqs):
            if seq.params.seed is not None and not greedy[row]:
                noise[row].exponential_(generator=self._seq_generator(seq))
        sampled = (probs / noise).argmax(dim=-1)
        return torch.where(self._tensor(greedy, torch.bool), argmax, sampled)

    def _seq_generator(self, seq: Sequence) -> torch.Generator:
        gen = self.seq_generators.get(seq.seq_id)
        if gen is None:
            gen = self.seq_generators[seq.seq_id] = torch.Generator(device=self.device)
            gen.manual_seed(seq.params.seed)
        return gen

    def _filter(self, logits: torch.Tensor, params: list) -> torch.Tensor:
        """top-k, then top-p over the renormalised top-k, then min-p; the best token always stays."""
        vocab = logits.shape[1]
        ordered, index = logits.sort(dim=-1, descending=True)
        ranks = torch.arange(vocab, device=logits.device)[None, :]
        top_k = self._tensor([p.top_k if p.top_k > 0 else vocab for p in params], torch.int64)[:, None]
        drop = ranks >= top_k
        probs = torch.softmax(ordered.masked_fill(drop, float("-inf")), dim=-1)
        top_p = self._tensor([p.top_p for p in params], probs.dtype)[:, None]
        drop |= (probs.cumsum(dim=-1) - probs) > top_p
        min_p = self._tensor([p.min_p for p in params], probs.dtype)[:, None]
        drop |= probs < min_p * probs[:, :1]
        drop[:, 0] = False
        return torch.empty_like(logits).scatter_(1, index, ordered.masked_fill(drop, float("-inf")))

    def _logprobs(self, logprobs: torch.Tensor, tokens: torch.Tensor, params: list) -> list[dict[int, float] | None]:
        k = max(p.logprobs or 0 for p in params if p.logprobs is not None)
        top_values, top_ids = logprobs.topk(k, dim=-1) if k else (logprobs[:, :0], tokens[:, None][:, :0])
        chosen = logprobs.gather(1, tokens[:, None])[:, 0].tolist()
        top_values, top_ids, token_list = top_values.tolist(), top_ids.tolist(), tokens.tolist()
        out: list[dict[int, float] | None] = []
        for row, p in enumerate(params):
            if p.logprobs is None:
                out.append(None)
                continue
            entry = dict(zip(top_ids[row][:p.logprobs], top_values[row][:p.logprobs]))
            entry[token_list[row]] = chosen[row]
            out.append(entry)
        return out
