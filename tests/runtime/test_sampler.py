"""Sampler vs independently written formulas: penalties (vLLM semantics) from the counts kept
across steps, rows reused and refilled after preemption, top-k / top-p / min-p support,
temperature distribution, seeded reproducibility, greedy rows in mixed batches, logprobs."""
from __future__ import annotations

import math

import pytest
import torch

from ascendtile.runtime.sampler import Sampler
from ascendtile.runtime.sampling_batch import build_batch
from ascendtile.runtime.sampling_params import SamplingParams
from ascendtile.runtime.sequence import Sequence

CPU = torch.device("cpu")


def seq(i: int, params: SamplingParams, prompt=(1, 2), output=()) -> Sequence:
    s = Sequence(i, list(prompt), params, 1000)
    for token in output:
        s.append_token(token, None, 0.0)
    return s


def sample(sampler: Sampler, logits: torch.Tensor, seqs: list[Sequence], append: bool = True) -> list[int]:
    """One sampler step; new sequences are added first, the tokens appended as the engine does."""
    for s in seqs:
        if s.seq_id not in sampler.seeds:
            sampler.add(s)
    tokens = sampler(logits.clone(), seqs).token_ids
    if append:
        for s, token in zip(seqs, tokens):
            s.append_token(token, None, 0.0)
    return tokens


def penalized(logits: list[float], p: SamplingParams, prompt: list[int], output: list[int]) -> list[float]:
    """vLLM's penalties written out per token."""
    out = []
    for tok, x in enumerate(logits):
        if tok in prompt or tok in output:
            x = x / p.repetition_penalty if x > 0 else x * p.repetition_penalty
        count = output.count(tok)
        out.append(x - p.frequency_penalty * count - (p.presence_penalty if count else 0.0))
    return out


def test_penalties_follow_the_formula_step_after_step():
    """Greedy rows with penalties over 12 steps: the counts kept on the device (10 penalised rows:
    the table grows past its first 8) must equal the outputs so far. Then a finished request's
    row is reused by a new one, which must not see the old counts."""
    gen = torch.Generator().manual_seed(0)
    vocab = 12
    params = [SamplingParams(temperature=0, repetition_penalty=1.2 + 0.1 * i, presence_penalty=0.3,
                             frequency_penalty=0.1 * i) for i in range(10)] + [SamplingParams(temperature=0)]
    seqs = [seq(i, p, prompt=[i % vocab, (3 * i) % vocab]) for i, p in enumerate(params)]
    sampler = Sampler(CPU)
    for _ in range(12):
        logits = torch.randn(len(seqs), vocab, generator=gen)
        expected = [max(range(vocab), key=penalized(row, s.params, s.prompt_token_ids, s.output_token_ids).__getitem__)
                    if s.params.needs_penalties else max(range(vocab), key=row.__getitem__)
                    for row, s in zip(logits.tolist(), seqs)]
        assert sample(sampler, logits, seqs) == expected
    assert len({tuple(s.output_token_ids) for s in seqs}) > 1
    freed = sampler.counts.rows[0]
    sampler.release(seqs[0])
    newcomer = seq(99, params[0], prompt=[5])
    logits = torch.randn(1, vocab, generator=gen)
    expected = max(range(vocab), key=penalized(logits[0].tolist(), params[0], [5], []).__getitem__)
    assert sample(sampler, logits, [newcomer]) == [expected]
    assert sampler.counts.rows[99] == freed


def test_preempted_request_draws_what_it_would_have_drawn():
    """Suspending (preemption) frees the counts row, another request takes it, and the sampled
    request refills it from its tokens: the same draws as a run never suspended."""
    p = SamplingParams(temperature=1.0, top_k=5, seed=7, repetition_penalty=1.5, frequency_penalty=0.5)
    gen = torch.Generator().manual_seed(1)
    logits = [torch.randn(1, 20, generator=gen) for _ in range(16)]
    straight = Sampler(CPU)
    a = seq(0, p, prompt=[1, 2, 3])
    for step in logits:
        sample(straight, step, [a])
    interrupted = Sampler(CPU)
    b = seq(0, p, prompt=[1, 2, 3])
    for i, step in enumerate(logits):
        if i == 8:
            interrupted.suspend(b)
            sample(interrupted, torch.randn(1, 20, generator=gen), [seq(1, p, prompt=[4])])  # takes the freed row
        sample(interrupted, step, [b])
    assert b.output_token_ids == a.output_token_ids


def _support(params: SamplingParams, logits: torch.Tensor, draws: int = 4000) -> set[int]:
    return set(sample(Sampler(CPU, seed=1), logits.expand(draws, -1), [seq(i, params) for i in range(draws)]))


def test_top_k_top_p_min_p_support():
    logits = torch.log(torch.tensor([[0.4, 0.25, 0.15, 0.1, 0.06, 0.04]]))
    assert _support(SamplingParams(top_k=2), logits) == {0, 1}
    assert _support(SamplingParams(top_p=0.7), logits) == {0, 1, 2}  # 0.4 + 0.25 < 0.7: the third is needed
    assert _support(SamplingParams(min_p=0.3), logits) == {0, 1, 2}  # p >= 0.3 * 0.4
    assert _support(SamplingParams(top_k=4, top_p=0.5), logits) == {0, 1}  # top-p over renormalised top-4
    assert _support(SamplingParams(), logits) == set(range(6))


def test_temperature_distribution():
    logits = torch.tensor([[1.0, 0.0, -1.0]])
    draws = 20000
    out = sample(Sampler(CPU, seed=3), logits.expand(draws, -1),
                 [seq(i, SamplingParams(temperature=0.5)) for i in range(draws)])
    probs = torch.softmax(logits[0] / 0.5, 0).tolist()
    for tok, p in enumerate(probs):
        freq = out.count(tok) / draws
        assert abs(freq - p) < 4 * math.sqrt(p * (1 - p) / draws) + 1e-3


VOCAB, STEPS = 50, 64


def _draws(batch_seed: int, seeds: list[int | None]) -> list[list[int]]:
    """STEPS draws per row from uniform logits over VOCAB tokens (each draw has 50 equally likely
    outcomes), one row per seed (None = unseeded: a seed from the batch's generator)."""
    sampler = Sampler(CPU, seed=batch_seed)
    seqs = [seq(i, SamplingParams(temperature=1.0, seed=s)) for i, s in enumerate(seeds)]
    for _ in range(STEPS):
        sample(sampler, torch.zeros(len(seqs), VOCAB), seqs)
    return [s.output_token_ids for s in seqs]


def test_seeded_rows_reproducible_and_distinct():
    """Equal seeds give equal draws whatever the batch (its seed, its other rows, the row's
    position); different seeds, or different batch seeds for unseeded rows, give different draws.
    Independent draws would be equal by chance with probability 50^-64 < 1e-108."""
    assert (1 / VOCAB) ** STEPS < 1e-108
    a = _draws(0, [42, None, 7])
    b = _draws(1, [None, 42])
    assert a[0] == b[1]  # same seed, another batch seed, another position and neighbours
    assert a[0] != _draws(0, [43, None, 7])[0]  # another seed, same batch otherwise
    assert a[0] != a[2]  # two seeds in one batch
    assert a[1] != b[0]  # unseeded rows follow the batch seed
    assert a[1] == _draws(0, [42, None, 7])[1]  # ... deterministically
    assert len(set(a[0])) > 1  # draws vary from step to step


def test_greedy_rows_argmax_beside_sampled_rows():
    logits = torch.randn(3, 50)
    params = [SamplingParams(temperature=1.0, seed=42), SamplingParams(temperature=0), SamplingParams(temperature=1.0)]
    out = sample(Sampler(CPU, seed=0), logits, [seq(i, p) for i, p in enumerate(params)])
    assert out[1] == int(logits[1].argmax())


def test_logprobs_top_k_plus_sampled():
    logits = torch.tensor([[3.0, 2.0, 1.0, 0.0]])
    sampler = Sampler(CPU)
    seqs = [seq(0, SamplingParams(temperature=0, logprobs=2)), seq(1, SamplingParams(temperature=0)),
            seq(2, SamplingParams(temperature=0.5, top_k=1, repetition_penalty=2.0, logprobs=1))]
    for s in seqs:
        sampler.add(s)
    out = sampler(logits.expand(3, -1).clone(), seqs)
    lp = torch.log_softmax(logits[0], 0).tolist()
    assert out.token_ids == [0, 0, 0] and out.logprobs[0] == pytest.approx({0: lp[0], 1: lp[1]})
    assert out.logprobs[1] is None
    assert out.logprobs[2] == pytest.approx({0: lp[0]})  # the model's logprobs: before penalties and filters


def test_temperature_below_sampling_eps_is_greedy():
    """vLLM's _SAMPLING_EPS: a temperature below 1e-5 samples greedily (filters ignored) instead of
    dividing the logits into infs; the ops get 0 for such a row, so the decision is
    SamplingParams.greedy's even where the fp32 rounding of the temperature reaches 1e-5."""
    tiny = [1e-38, 1e-30, 5e-6, 1e-5 - 1e-13]
    assert all(SamplingParams(temperature=t).greedy for t in tiny) and not SamplingParams(temperature=1e-5).greedy
    logits = torch.randn(len(tiny), 300) * 3
    params = [SamplingParams(temperature=t, top_k=3, top_p=0.5, seed=i) for i, t in enumerate(tiny)]
    seqs = [seq(i, p) for i, p in enumerate(params)]
    assert sample(Sampler(CPU), logits, seqs, append=False) == logits.argmax(-1).tolist()
    assert build_batch(seqs, [0] * len(seqs), None, CPU).temperatures.tolist() == [0.0] * len(tiny)
    for bad in (math.inf, math.nan, -1e-38):
        with pytest.raises(ValueError, match="temperature"):
            SamplingParams(temperature=bad)
