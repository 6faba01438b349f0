"""Sampler vs independently written formulas: penalties (vLLM semantics), top-k / top-p /
min-p support, temperature distribution, seeded reproducibility, greedy rows in mixed batches."""
from __future__ import annotations

import math

import torch

from ascendkit.runtime.sampler import Sampler
from ascendkit.runtime.sampling_params import SamplingParams
from ascendkit.runtime.sequence import Sequence

CPU = torch.device("cpu")


def seq(i: int, params: SamplingParams, prompt=(1, 2), output=()) -> Sequence:
    s = Sequence(i, list(prompt), params, 1000)
    for token in output:
        s.append_token(token, None, 0.0)
    return s


def test_penalties_match_formula():
    logits = torch.tensor([[2.0, -1.0, 0.5, 3.0, -2.0, 1.0]])
    p = SamplingParams(temperature=0, repetition_penalty=1.5, presence_penalty=0.3, frequency_penalty=0.2)
    s = seq(0, p, prompt=[0, 1], output=[3, 3, 4])
    got = Sampler(CPU)._apply_penalties(logits.clone(), [s])[0].tolist()
    expected = []
    for tok, x in enumerate(logits[0].tolist()):
        if tok in (0, 1, 3, 4):
            x = x / 1.5 if x > 0 else x * 1.5
        count = [3, 3, 4].count(tok)
        expected.append(x - 0.2 * count - (0.3 if count else 0.0))
    torch.testing.assert_close(torch.tensor(got), torch.tensor(expected))


def _support(params: SamplingParams, logits: torch.Tensor, draws: int = 4000) -> set[int]:
    sampler = Sampler(CPU, seed=1)
    rows = logits.expand(draws, -1).clone()
    out = sampler(rows, [seq(i, params) for i in range(draws)]).token_ids
    return set(out)


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
    out = Sampler(CPU, seed=3)(logits.expand(draws, -1).clone(),
                               [seq(i, SamplingParams(temperature=0.5)) for i in range(draws)]).token_ids
    probs = torch.softmax(logits[0] / 0.5, 0).tolist()
    for tok, p in enumerate(probs):
        freq = out.count(tok) / draws
        assert abs(freq - p) < 4 * math.sqrt(p * (1 - p) / draws) + 1e-3


VOCAB, STEPS = 50, 64


def _draws(batch_seed: int, seeds: list[int | None]) -> list[list[int]]:
    """STEPS draws per row from uniform logits over VOCAB tokens (each draw has 50 equally likely
    outcomes), one row per seed (None = unseeded: the batch generator)."""
    sampler = Sampler(CPU, seed=batch_seed)
    seqs = [seq(i, SamplingParams(temperature=1.0, seed=s)) for i, s in enumerate(seeds)]
    steps = [sampler(torch.zeros(len(seqs), VOCAB), seqs).token_ids for _ in range(STEPS)]
    return [list(row) for row in zip(*steps)]


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
    out = Sampler(CPU, seed=0)(logits.clone(), [seq(i, p) for i, p in enumerate(params)]).token_ids
    assert out[1] == int(logits[1].argmax())


def test_logprobs_top_k_plus_sampled():
    logits = torch.tensor([[3.0, 2.0, 1.0, 0.0]])
    out = Sampler(CPU)(logits, [seq(0, SamplingParams(temperature=0, logprobs=2))])
    lp = torch.log_softmax(logits[0], 0).tolist()
    assert out.token_ids == [0] and out.logprobs[0] == {0: lp[0], 1: lp[1]}
