"""sampling family, the op contract: seeded draws follow the exact filtered distribution
(chi-square), never a filtered token, the tie rule, batch-independent seeds, penalties and
logprobs vs independent formulas, opcheck / torch.compile on both paths, bad inputs.
(Triton kernels vs references: tests/kernels/test_sampling.py.)"""
import pytest
import torch

import ascendtile.ops as ak
from ascendtile.ops.reference import _sampling_draw
from ascendtile.ops.sampling import SAMPLING_EPS
from opchecks import op_contract_tests, raises_naming, seeded_generator
from ops._sampling import (
    INF, INF_ROW, INF_TOKENS, NAN, NAN_CHUNK_ROW, SETTINGS, check_distribution, check_uniform, chi2_bound, draw,
    draws_per_row, nonfinite_rows,
)

OPS = torch.ops.ascend
I32, I64 = torch.int32, torch.int64


@pytest.mark.parametrize("setting", SETTINGS, ids=str)
def test_distribution_matches_filtered(setting):
    check_distribution(setting, 20000)


@pytest.mark.slow
@pytest.mark.parametrize("setting", SETTINGS[4:6], ids=str)
def test_distribution_matches_filtered_triton(setting, triton_path):
    # The Gumbel-max kernel's own distribution, with fewer draws than the reference path's 20000
    # (a few ms each under the interpreter once the row is filtered); the bound holds for any n,
    # so a correct kernel still fails a setting with probability 1e-4; n = 1000 expects >= 70
    # draws per kept token.
    check_distribution(setting, 1000)


@pytest.mark.parametrize("way", ["live chunks", "whole row"])
def test_draw_over_many_chunks_matches_softmax(way, monkeypatch):
    """Both ways of the reference draw (_sampling_draw.py: the live chunks packed end to end, or
    the whole row, where LIVE = 0 sends every row) against softmax, per token: 8000 draws with
    seeds 0..7999 (deterministic) from 640 tokens (10 chunks) holding -inf and a NaN as a chunk's
    max, which both must skip without losing that chunk's other tokens. Every p > 0 is within a
    factor e^0.5 of uniform: each kept token expects >= 7 draws."""
    if way == "whole row":
        monkeypatch.setattr(_sampling_draw, "LIVE", 0)
    logits = torch.rand(640, generator=seeded_generator(11)) * 0.5
    logits[[3, 200, 639]] = -INF
    logits[130] = NAN
    n = 8000
    tokens = ak.sample_tokens(logits.expand(n, -1).contiguous(), torch.ones(n), torch.arange(n, dtype=I64),
                              torch.zeros(n, dtype=I64)).long()
    probs = torch.softmax(torch.where(logits.isnan(), -INF, logits).double(), 0)
    counts = torch.bincount(tokens, minlength=640).double()
    assert int(counts[probs == 0].sum()) == 0
    expected = probs[probs > 0] * n
    chi2 = float(((counts[probs > 0] - expected) ** 2 / expected).sum())
    assert chi2 < chi2_bound(int((probs > 0).sum()) - 1), chi2


def test_nonfinite_rows_follow_the_rules_on_both_draw_ways(monkeypatch):
    """NaN never drawn nor the argmax (and a chunk whose max is NaN still gives its other
    tokens), +inf tokens drawn uniformly and the first taken greedily, rows of -inf or NaN give
    token 0; the two ways of the draw give the same token for every seed."""
    rows, support, greedy = nonfinite_rows()
    zeros = torch.zeros(7, dtype=I64)
    assert ak.sample_tokens(rows, torch.zeros(7), zeros, zeros).tolist() == greedy
    live = draws_per_row(rows, 300)
    monkeypatch.setattr(_sampling_draw, "LIVE", 0)
    assert torch.equal(draws_per_row(rows, 300), live)
    for i, allowed in enumerate(support):
        assert set(live[i].tolist()) <= allowed, i
    assert float((live[NAN_CHUNK_ROW] // 64 == 1).double().mean()) > 0.5  # chunk 1 holds most of the mass
    check_uniform(live[INF_ROW], INF_TOKENS)


def test_temperature_below_sampling_eps_is_greedy():
    """vLLM's _SAMPLING_EPS: below 1e-5 a row is greedy (left raw, argmax), so a tiny temperature
    never divides it into infs; at 1e-5 it is scaled and filtered."""
    assert SAMPLING_EPS == 1e-5
    logits = torch.randn(4, 300) * 3
    raw = logits.clone()
    temps = torch.tensor([1e-38, 9.99e-6, 1e-5, 0.0])
    ak.process_logits(logits, temps, torch.full((4,), 5, dtype=I32), torch.full((4,), 0.9), torch.zeros(4))
    assert torch.equal(logits[[0, 1, 3]], raw[[0, 1, 3]])
    kept = raw[2].topk(5).indices
    assert torch.isfinite(logits[2]).sum() <= 5 and torch.equal(logits[2, kept[:1]], raw[2, kept[:1]] / 1e-5)
    tokens = ak.sample_tokens(logits, temps, torch.arange(4, dtype=I64), torch.zeros(4, dtype=I64))
    assert tokens.tolist() == raw.argmax(-1).tolist()


def test_process_logits_nonfinite_rows():
    """A filtered row turns NaN into -inf and keeps only its +inf tokens if it holds any (then
    filters as usual); a row only scaled keeps its NaN and infs."""
    rows, _, _ = nonfinite_rows()
    filtered = rows.clone()
    ak.process_logits(filtered, torch.full((7,), 0.5), torch.full((7,), 20, dtype=I32), torch.ones(7), torch.zeros(7))
    clean = torch.where(rows.isnan(), -INF, rows) / 0.5
    for i in range(7):
        if (clean[i] == INF).any():
            expected = torch.where(clean[i] == INF, INF, -INF)
        else:  # top-20, ties impossible here; a row of -inf stays one
            expected = torch.where(clean[i] >= clean[i].topk(20).values[-1], clean[i], -INF)
        assert torch.equal(filtered[i], expected), i
    scaled = rows.clone()
    ak.process_logits(scaled, torch.full((7,), 0.5), torch.zeros(7, dtype=I32), torch.ones(7), torch.zeros(7))
    torch.testing.assert_close(scaled, rows / 0.5, rtol=0, atol=0, equal_nan=True)


def test_logprobs_of_nonfinite_rows():
    """NaN reads as -inf; +inf tokens share the mass (-log 3), the rest -inf; a row of -inf or
    NaN has every logprob -inf; the top ids follow (value desc, id asc)."""
    rows, _, _ = nonfinite_rows()
    tokens = torch.tensor([10, 64, 200, 130, 170, 4, 4], dtype=I32)
    values, ids = ak.gather_logprobs(rows, torch.arange(7, dtype=I32), tokens, 3)
    clean = torch.where(rows.isnan(), -INF, rows)
    expected = torch.log_softmax(clean, -1)
    expected[2] = torch.where(clean[2] == INF, 0.0, -INF)
    expected[3] = torch.where(clean[3] == INF, -torch.tensor(3.0).log(), -INF)
    expected[5:] = -INF
    torch.testing.assert_close(values[:, 0], expected.gather(1, tokens.long()[:, None])[:, 0])
    assert ids[2:, 1:].tolist() == [[200, 0, 1], INF_TOKENS, [170, 0, 1], [0, 1, 2], [0, 1, 2]]
    assert ids[:2, 1:].tolist() == expected[:2].topk(3).indices.tolist()
    torch.testing.assert_close(values[:, 1:], expected.gather(1, ids[:, 1:].long()))


def test_filtered_tokens_never_sampled_large_vocab():
    logits = torch.randn(1, 5000) * 3
    for setting in (dict(top_k=7), dict(top_p=0.3), dict(min_p=0.5), dict(top_k=200, top_p=0.99)):
        rows = logits.expand(512, -1).clone()
        ak.process_logits(rows, torch.ones(512), torch.full((512,), setting.get("top_k", 0), dtype=I32),
                          torch.full((512,), setting.get("top_p", 1.0)), torch.full((512,), setting.get("min_p", 0.0)))
        tokens = ak.sample_tokens(rows, torch.ones(512), torch.arange(512, dtype=I64), torch.zeros(512, dtype=I64))
        assert torch.isfinite(rows[0, tokens.long()]).all(), setting


def test_boundary_ties_are_kept():
    logits = torch.tensor([[3.0, 2.0, 2.0, 2.0, 1.0, 0.0]] * 4)
    e = torch.exp(logits[0] - 3.0)
    ak.process_logits(logits, torch.ones(4), torch.tensor([2, 0, 0, 0], dtype=I32),
                      torch.tensor([1.0, 0.5, 1.0, float(1 / e.sum())]), torch.tensor([0.0, 0.0, float(e[1]), 0.0]))
    kept = torch.isfinite(logits).int().tolist()
    assert kept[0] == [1, 1, 1, 1, 0, 0]  # top-2: the three tokens tied at rank 2 all stay
    assert kept[1] == [1, 1, 1, 1, 0, 0]  # top-p 0.5: the mass above each tied token is the same
    if torch.get_default_device().type == "cpu":  # exact ties with torch.exp's values: a GPU's tl.exp is approximate
        assert kept[2] == [1, 1, 1, 1, 0, 0]  # min-p exactly at the tied value: kept (>=)
        assert kept[3] == [1, 1, 1, 1, 0, 0]  # top-p equal to the best token's share: mass above <= top_p


def test_greedy_rows_take_argmax_and_stay_raw():
    logits = torch.randn(3, 40)
    logits[1, 5] = logits[1, 9] = logits[1].max() + 1  # tie: lowest id
    raw = logits.clone()
    temps = torch.tensor([0.0, 0.0, 1.0])
    ak.process_logits(logits, temps, torch.tensor([3, 3, 3], dtype=I32), torch.full((3,), 0.5), torch.zeros(3))
    assert torch.equal(logits[:2], raw[:2])
    tokens = ak.sample_tokens(logits, temps, torch.zeros(3, dtype=I64), torch.zeros(3, dtype=I64))
    assert tokens[:2].tolist() == [int(raw[0].argmax()), 5]


@pytest.mark.parametrize("batch", [1, 7, 32])
def test_same_seed_same_tokens_in_any_batch(batch):
    vocab = 300
    target = torch.randn(vocab) * 2
    alone = [int(draw(target[None], 1, temperature=0.9, top_p=0.95, step=s)[0]) for s in range(4)]
    generator = seeded_generator(batch)
    for step in range(4):
        logits = torch.randn(batch, vocab, generator=generator) * 2
        at = int(torch.randint(batch, (1,), generator=generator))
        logits[at] = target
        seeds = torch.randint(1 << 40, (batch,), generator=generator)
        seeds[at] = 0  # _draw's single row has seed 0
        temps = torch.rand(batch, generator=generator) + 0.2
        temps[at] = 0.9
        top_p = torch.full((batch,), 0.95)
        ak.process_logits(logits, temps, torch.zeros(batch, dtype=I32), top_p, torch.zeros(batch))
        tokens = ak.sample_tokens(logits, temps, seeds, torch.full((batch,), step, dtype=I64))
        assert int(tokens[at]) == alone[step]


def test_seeds_and_steps_change_thedraw():
    draws = {tuple(draw(torch.zeros(1, 1000), 1, step=s).tolist()) for s in range(20)}
    assert len(draws) > 15


def test_penalties_match_vllm_formula():
    vocab = 9
    logits = torch.tensor([[2.0, -1.0, 0.5, 3.0, -2.0, 1.0, 0.0, 4.0, -0.5]] * 2)
    prompts, outputs = [[0, 1], [8]], [[3, 3, 4], []]
    counts = torch.zeros(3, vocab, dtype=I32)
    prompt_mask = torch.zeros(3, vocab, dtype=torch.int8)
    for slot, (prompt, output) in zip((2, 0), zip(prompts, outputs)):
        prompt_mask[slot, prompt] = 1
        for tok in output:
            ak.update_token_counts(counts, torch.tensor([slot], dtype=I32), torch.tensor([tok], dtype=I32))
    rep, freq, pres = torch.tensor([1.5, 2.0]), torch.tensor([0.2, 0.4]), torch.tensor([0.3, -0.1])
    got = ak.apply_penalties(logits.clone(), counts, prompt_mask, torch.tensor([2, 0], dtype=I32), rep, freq, pres)
    for row in range(2):
        for tok in range(vocab):
            x = float(logits[row, tok])
            count = outputs[row].count(tok)
            if tok in prompts[row] or count:
                x = x / float(rep[row]) if x > 0 else x * float(rep[row])
            x -= float(freq[row]) * count + (float(pres[row]) if count else 0.0)
            assert float(got[row, tok]) == pytest.approx(x, rel=1e-6, abs=1e-6)


def test_padding_rows_untouched_and_counts_skip_them():
    logits = torch.randn(2, 5)
    counts = torch.ones(1, 5, dtype=I32)
    rows = torch.tensor([-1, 0], dtype=I32)
    got = ak.apply_penalties(logits.clone(), counts, torch.zeros(1, 5, dtype=torch.int8), rows,
                             torch.full((2,), 2.0), torch.ones(2), torch.ones(2))
    assert torch.equal(got[0], logits[0]) and not torch.equal(got[1], logits[1])
    ak.update_token_counts(counts, rows, torch.tensor([4, 2], dtype=I32))
    assert counts.tolist() == [[1, 1, 2, 1, 1]]


def test_logprobs_equal_log_softmax_of_processed_logits():
    logits = torch.randn(5, 200) * 2
    ak.process_logits(logits, torch.full((5,), 0.8), torch.full((5,), 20, dtype=I32), torch.ones(5), torch.zeros(5))
    tokens = ak.sample_tokens(logits, torch.full((5,), 0.8), torch.arange(5, dtype=I64), torch.zeros(5, dtype=I64))
    rows = torch.tensor([4, 1], dtype=I32)
    values, ids = ak.gather_logprobs(logits, rows, tokens, 3)
    expected = torch.log_softmax(logits[[4, 1]], -1)
    assert ids[:, 0].tolist() == tokens[[4, 1]].tolist()
    torch.testing.assert_close(values[:, 0], expected.gather(1, tokens[[4, 1]].long()[:, None])[:, 0])
    top = expected.topk(3, -1)
    assert ids[:, 1:].tolist() == top.indices.tolist()
    torch.testing.assert_close(values[:, 1:], top.values)



def test_top_logprobs_tied_across_the_last_place_take_the_lowest_ids():
    logits = torch.randn(3, 300)
    logits[0, 50:60] = 9.0  # ten tied at 9.0, three places left after the 10.0: ids 50, 51, 52
    logits[0, 7] = 10.0
    logits[1, 200:] = 9.0  # a hundred tied: the row has no token above them
    values, ids = ak.gather_logprobs(logits, torch.tensor([0, 1, 2], dtype=I32), torch.zeros(3, dtype=I32), 4)
    assert ids[0, 1:].tolist() == [7, 50, 51, 52] and ids[1, 1:].tolist() == [200, 201, 202, 203]
    assert ids[2, 1:].tolist() == logits[2].topk(4).indices.tolist()  # no tie: topk's answer
    torch.testing.assert_close(values[:, 1:], torch.log_softmax(logits, -1).gather(1, ids[:, 1:].long()))

def _rows(n=4, vocab=64):
    return torch.randn(n, vocab), torch.full((n,), 0.8), torch.tensor([0, 5, 0, 3], dtype=I32)[:n], \
        torch.tensor([0.9, 1.0, 0.5, 1.0])[:n], torch.tensor([0.0, 0.1, 0.0, 0.0])[:n]


test_opcheck, test_compile = op_contract_tests({
    "process_logits": lambda: list(_rows()),
    "sample_tokens": lambda: [torch.empty(4, dtype=I32), torch.randn(4, 64), torch.tensor([0.0, 1.0, 0.5, 2.0]),
                              torch.arange(4, dtype=I64), torch.full((4,), 3, dtype=I64)],
    "apply_penalties": lambda: [torch.randn(3, 64), torch.randint(0, 3, (4, 64), dtype=I32),
                                torch.randint(0, 2, (4, 64), dtype=torch.int8), torch.tensor([2, -1, 0], dtype=I32),
                                torch.tensor([1.2, 1.0, 0.8]), torch.tensor([0.1, 0.0, 0.3]), torch.tensor([0.5, 0.0, 0.2])],
    "update_token_counts": lambda: [torch.zeros(4, 64, dtype=I32), torch.tensor([3, -1, 0], dtype=I32),
                                    torch.tensor([7, 8, 63], dtype=I32)],
    "gather_logprobs": lambda: [torch.empty(2, 4), torch.empty(2, 4, dtype=I32), torch.randn(3, 64),
                                torch.tensor([2, 0], dtype=I32), torch.tensor([1, 2, 3], dtype=I32)],
})


def test_bad_inputs(values_checked):
    logits, temps, top_k, top_p, min_p = _rows()
    raises_naming(ValueError, "temperatures", OPS.process_logits, logits, torch.tensor([0.8, -0.1, 1.0, 1.0]), top_k, top_p, min_p)
    raises_naming(ValueError, "top_k", OPS.process_logits, logits, temps, torch.tensor([0, -1, 0, 0], dtype=I32), top_p, min_p)
    raises_naming(ValueError, "top_p", OPS.process_logits, logits, temps, top_k, torch.tensor([0.9, 0.0, 1.0, 1.0]), min_p)
    raises_naming(ValueError, "top_p", OPS.process_logits, logits, temps, top_k, torch.tensor([0.9, 1.01, 1.0, 1.0]), min_p)
    raises_naming(ValueError, "min_p", OPS.process_logits, logits, temps, top_k, top_p, torch.tensor([0.0, 1.5, 0.0, 0.0]))
    raises_naming(TypeError, "top_k", OPS.process_logits, logits, temps, top_k.long(), top_p, min_p)
    raises_naming(TypeError, "logits", OPS.process_logits, logits.half(), temps, top_k, top_p, min_p)
    raises_naming(ValueError, "temperatures", OPS.process_logits, logits, temps[:3], top_k, top_p, min_p)
    tokens, seeds = torch.empty(4, dtype=I32), torch.zeros(4, dtype=I64)
    raises_naming(ValueError, "temperatures", OPS.sample_tokens, tokens, logits, -temps, seeds, seeds)
    raises_naming(TypeError, "seeds", OPS.sample_tokens, tokens, logits, temps, seeds.int(), seeds)
    counts, mask = torch.zeros(2, 64, dtype=I32), torch.zeros(2, 64, dtype=torch.int8)
    pen = torch.ones(4)
    raises_naming(ValueError, "count_rows", OPS.apply_penalties, logits, counts, mask, torch.tensor([0, 2, -1, -1], dtype=I32), pen, pen, pen)
    raises_naming(ValueError, "count_rows", OPS.apply_penalties, logits, counts, mask, torch.tensor([0, 0, -1, -1], dtype=I32), pen, pen, pen)
    raises_naming(ValueError, "repetition_penalties", OPS.apply_penalties, logits, counts, mask, torch.tensor([0, 1, -1, -1], dtype=I32), -pen, pen, pen)
    raises_naming(ValueError, "output_counts", OPS.apply_penalties, logits, torch.zeros(2, 63, dtype=I32), mask, torch.tensor([0, 1, -1, -1], dtype=I32), pen, pen, pen)
    raises_naming(ValueError, "token_ids", OPS.update_token_counts, counts, torch.tensor([0], dtype=I32), torch.tensor([64], dtype=I32))
    raises_naming(ValueError, "rows", OPS.gather_logprobs, torch.empty(1, 2), torch.empty(1, 2, dtype=I32), logits,
                  torch.tensor([4], dtype=I32), tokens.zero_())
