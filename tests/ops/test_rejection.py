"""rejection family, the op contract: greedy and seeded verification vs loop references (every
handled row fully written, the others untouched), the first emitted token distributed like the
target p (one-hot and sampled drafts, chi-square), the recovered draw like normalize(max(p - q,
0)), the edge rules (no positive residual, padded drafts, q(x) = 0), batch-independent seeds,
opcheck / torch.compile on both paths, bad inputs. (Triton kernels vs references:
tests/kernels/test_rejection.py.)"""
import pytest
import torch

import ascendtile.ops as ak
from ascendtile.ops.reference import rejection as reference
from opchecks import op_contract_tests, raises_naming, seeded_generator
from ops._rejection import (
    ACCEPT_SALT, RECOVER_SALT, STEP_SALT, check_draws, cu_of, greedy_rows, random_rows, residual, sparse_probs,
)

OPS = torch.ops.ascend
I32, I64 = torch.int32, torch.int64
SENTINEL = 12345  # a value no op writes: rows an op must leave alone keep it


def _probs(tokens: int, vocab: int, seed: int) -> torch.Tensor:
    return torch.softmax(torch.randn(tokens, vocab, generator=seeded_generator(seed)) * 2, -1)


def test_salts_are_documented_and_distinct():
    assert (reference.ACCEPT_SALT, reference.RECOVER_SALT) == (ACCEPT_SALT, RECOVER_SALT)
    assert len({ACCEPT_SALT, RECOVER_SALT, STEP_SALT}) == 3


@pytest.mark.parametrize("all_greedy", [False, True])
def test_greedy_matches_loop(all_greedy):
    # rows: all accepted, first rejected, no drafts, mid rejection, a padded draft (-1), one draft
    counts = [3, 2, 0, 5, 2, 1, 0]
    argmax = [4, 8, 1, 7, 7, 3, 9, 9, 2, 0, 6, 5, 2]
    drafts = [4, 8, 1, 6, 7, 3, 9, 1, 2, 0, -1, 5, 2]
    bonus = [100, 101, 102, 103, 104, 105, 106]
    greedy = [True] * 7 if all_greedy else [True, True, False, True, True, False, True]
    width = 6
    out = torch.full((7, width), SENTINEL, dtype=I32)
    OPS.rejection_greedy_sample(out, cu_of(counts), torch.tensor(drafts, dtype=I32), torch.tensor(argmax, dtype=I32),
                                torch.tensor(bonus, dtype=I32), None if all_greedy else torch.tensor(greedy))
    expected = greedy_rows(counts, drafts, argmax, bonus, width, greedy, [[SENTINEL] * width] * 7)
    assert out.tolist() == expected
    assert expected[0][:4] == [4, 8, 1, 100] and expected[1][:2] == [7, -1] and expected[3][:4] == [3, 9, 9, -1]
    assert expected[4][:2] == [6, -1] and expected[6][:2] == [106, -1]


def test_greedy_wrapper_allocates_placeholder_rows():
    out = ak.rejection_greedy_sample(cu_of([1, 2]), torch.tensor([3, 5, 6], dtype=I32), torch.tensor([3, 5, 0], dtype=I32),
                                     torch.tensor([7, 8], dtype=I32), 3, torch.tensor([True, False]))
    assert out.tolist() == [[3, 7, -1, -1], [-1, -1, -1, -1]]


def _random_batch(vocab: int, with_q: bool, seed: int = 0):
    """Odd counts (0 drafts too), drafts that p favours or not, a padded draft, a draft q gives 0."""
    counts = [3, 0, 4, 1, 2, 5]
    tokens = sum(counts)
    generator = seeded_generator(seed)
    target = _probs(tokens, vocab, seed + 1)
    q = _probs(tokens, vocab, seed + 2) if with_q else None
    drafts = torch.randint(vocab, (tokens,), generator=generator, dtype=I32)
    drafts[:3] = target[:3].argmax(-1).int()  # request 0: likely all accepted
    drafts[7] = -1  # a padded draft: rejected
    if with_q:
        q[9, drafts[9]] = 0.0  # q(x) = 0: rejected
    recovered = torch.randint(vocab, (tokens,), generator=generator, dtype=I32)
    bonus = torch.arange(200, 206, dtype=I32)
    seeds = torch.tensor([0, 5, -3, 2**40 + 1, 77, 123456789], dtype=I64)
    steps = torch.arange(tokens, dtype=I64) * 31 + 1000
    return counts, drafts, q, target, bonus, recovered, seeds, steps


@pytest.mark.parametrize("with_q", [False, True])
def test_random_matches_loop(with_q):
    counts, drafts, q, target, bonus, recovered, seeds, steps = _random_batch(1037, with_q)
    greedy = torch.tensor([False, False, False, True, False, False])
    width = 7
    out = torch.full((6, width), SENTINEL, dtype=I32)
    ak.rejection_random_sample(out, cu_of(counts), drafts, q, target, bonus, recovered, seeds, steps, greedy)
    expected = random_rows(counts, drafts.tolist(), target, q, bonus.tolist(), recovered.tolist(), seeds.tolist(),
                           steps.tolist(), width, greedy.tolist(), [[SENTINEL] * width] * 6)
    assert out.tolist() == expected
    assert out[1].tolist() == [201] + [-1] * 6  # no drafts: the bonus alone


def test_acceptance_is_min_one_p_over_q():
    """Draft x with p(x) = a, q(x) = b over many seeds: accepted at rate min(1, a / b)."""
    n = 4000
    for a, b in ((0.3, 0.6), (0.2, 0.2), (0.45, 0.15), (0.0, 0.5)):
        target = torch.full((n, 4), (1 - a) / 3)
        target[:, 1] = a
        q = torch.full((n, 4), (1 - b) / 3)
        q[:, 1] = b
        out = torch.full((n, 2), SENTINEL, dtype=I32)
        ak.rejection_random_sample(out, torch.arange(1, n + 1, dtype=I32), torch.ones(n, dtype=I32), q, target,
                                   torch.full((n,), 3, dtype=I32), torch.zeros(n, dtype=I32), torch.arange(n, dtype=I64),
                                   torch.zeros(n, dtype=I64), torch.zeros(n, dtype=torch.bool))
        rate = float((out[:, 0] == 1).double().mean())
        expect = min(1.0, a / b)
        assert abs(rate - expect) <= 4 * (expect * (1 - expect) / n) ** 0.5 + 1e-9, (a, b, rate)
        assert ((out[:, 0] == 1) == (out[:, 1] == 3)).all()  # accepted: bonus after; rejected: -1


def _first_tokens(p: torch.Tensor, q: torch.Tensor | None, drafts: torch.Tensor) -> torch.Tensor:
    """The first emitted token of n one-draft requests sharing target p (and q), seeds 0..n-1."""
    n = drafts.shape[0]
    target = p.expand(n, -1).contiguous()
    q_rows = None if q is None else q.expand(n, -1).contiguous()
    cu, seeds, steps = torch.arange(1, n + 1, dtype=I32), torch.arange(n, dtype=I64), torch.full((n,), 9, dtype=I64)
    recovered = ak.sample_recovered_tokens(cu, drafts, q_rows, target, seeds, steps)
    out = torch.full((n, 2), SENTINEL, dtype=I32)
    ak.rejection_random_sample(out, cu, drafts, q_rows, target, torch.full((n,), -5, dtype=I32), recovered, seeds,
                               steps, torch.zeros(n, dtype=torch.bool))
    return out[:, 0].long()


@pytest.mark.parametrize("temperature", [0.7, 1.5])
def test_first_token_follows_target_with_one_hot_draft(temperature):
    """n-gram drafts (q one-hot): whatever the fixed draft, the emitted token is distributed as p
    (accepted with p(x), else drawn from p without x) over 200 tokens (4 reference chunks, a tail)."""
    p = sparse_probs(203, temperature, seed=3)
    draft = int(p.argmax())
    check_draws(_first_tokens(p, None, torch.full((6000,), draft, dtype=I32)), p.double())


def test_first_token_follows_target_with_sampled_drafts():
    """A draft model's token x ~ q, accepted with min(1, p/q), else the residual draw: p exactly."""
    p, q = sparse_probs(203, 1.0, seed=4), sparse_probs(203, 0.8, seed=5, every=7)
    n = 6000
    drafts = torch.multinomial(q, n, replacement=True, generator=seeded_generator(6)).int()
    check_draws(_first_tokens(p, q, drafts), p.double())


@pytest.mark.parametrize("with_q", [False, True])
def test_recovered_draw_follows_residual(with_q):
    p = sparse_probs(203, 1.0, seed=7, every=5)
    q = sparse_probs(203, 1.0, seed=8, every=3) if with_q else None
    draft = int(p.argmax())
    n = 5000
    tokens = ak.sample_recovered_tokens(torch.tensor([n], dtype=I32), torch.full((n,), draft, dtype=I32),
                                        None if q is None else q.expand(n, -1), p.expand(n, -1).contiguous(),
                                        torch.tensor([11], dtype=I64), torch.arange(n, dtype=I64))
    check_draws(tokens.long(), residual(p, q, draft))


def test_recovered_edge_rules():
    """No positive residual: the draft (p one-hot at it; p == q), or 0 for a padded draft of a p
    with no mass; a padded draft zeros nothing (draws from p); NaN residuals never drawn."""
    vocab = 130
    p = torch.zeros(5, vocab)
    p[0, 77] = 1.0  # one-hot at the draft, q one-hot: residual 0
    p[1] = torch.softmax(torch.randn(vocab), 0)  # equals q below: residual 0
    p[2, 9] = 1.0  # padded draft: draws from p -> 9
    p[4, 40], p[4, 41] = float("nan"), 1.0  # a NaN never drawn
    q = p.clone()
    q[[0, 2, 3, 4]] = 0.0
    q[0, 77] = 1.0
    drafts = torch.tensor([77, 5, -1, -1, 3], dtype=I32)
    cu, seeds, steps = torch.tensor([2, 5], dtype=I32), torch.tensor([1, 2], dtype=I64), torch.arange(5, dtype=I64)
    with_q = ak.sample_recovered_tokens(cu, drafts, q, p, seeds, steps)
    assert with_q.tolist() == [77, 5, 9, 0, 41]
    one_hot = ak.sample_recovered_tokens(cu, drafts, None, p, seeds, steps)
    assert one_hot[[0, 2, 3, 4]].tolist() == [77, 9, 0, 41]


def _one_request(seed: int, vocab: int, k: int):
    generator = seeded_generator(seed)
    target = torch.softmax(torch.randn(k, vocab, generator=generator), -1)
    q = torch.softmax(torch.randn(k, vocab, generator=generator), -1)
    drafts = torch.multinomial(q, 1, generator=generator)[:, 0].int()
    return drafts, q, target


def _verify(counts, drafts, q, target, seeds, steps, bonus, width=6):
    cu = cu_of(counts)
    recovered = ak.sample_recovered_tokens(cu, drafts, q, target, seeds, steps)
    out = torch.full((len(counts), width), SENTINEL, dtype=I32)
    ak.rejection_random_sample(out, cu, drafts, q, target, torch.tensor(bonus, dtype=I32), recovered, seeds, steps,
                               torch.zeros(len(counts), dtype=torch.bool))
    return recovered, out


@pytest.mark.parametrize("at", [0, 2, 4])
def test_same_seed_same_tokens_in_any_batch(at):
    """A request's recovered tokens and output row depend on its own (seed, steps) only: alone, or
    at any place among requests with other seeds, steps and draft counts."""
    vocab, k = 300, 4
    mine = _one_request(1, vocab, k)
    steps = torch.arange(40, 40 + k, dtype=I64)
    alone_rec, alone_out = _verify([k], *mine, torch.tensor([99], dtype=I64), steps, [500])
    counts, parts, seeds, all_steps = [], [], [], []
    for r in range(5):
        n = k if r == at else (r + 2) % 4
        counts.append(n)
        parts.append(mine if r == at else _one_request(10 + r + at, vocab, n))
        seeds.append(99 if r == at else 1000 + r)
        all_steps.append(steps if r == at else torch.arange(n, dtype=I64))
    joined = [torch.cat([part[i] for part in parts]) for i in range(3)]
    bonus = [500 if r == at else 600 + r for r in range(5)]
    rec, out = _verify(counts, *joined, torch.tensor(seeds, dtype=I64), torch.cat(all_steps), bonus)
    start = sum(counts[:at])
    assert rec[start:start + k].tolist() == alone_rec.tolist()
    assert out[at].tolist() == alone_out[0].tolist()


def test_seeds_and_steps_change_the_draws():
    p = torch.full((1, 1000), 1e-3)
    draws = {int(ak.sample_recovered_tokens(torch.tensor([1], dtype=I32), torch.tensor([-1], dtype=I32), None, p,
                                            torch.tensor([0], dtype=I64), torch.tensor([s], dtype=I64))[0])
             for s in range(20)}
    assert len(draws) > 15


def _greedy_args():
    return [torch.empty(3, 4, dtype=I32), cu_of([2, 0, 3]), torch.tensor([1, 2, 3, 4, 5], dtype=I32),
            torch.tensor([1, 0, 3, 4, 5], dtype=I32), torch.tensor([7, 8, 9], dtype=I32),
            torch.tensor([True, False, True])]


def _recovered_args(with_q=True):
    target = _probs(5, 70, 0)
    return [torch.empty(5, dtype=I32), cu_of([2, 0, 3]), torch.tensor([1, 2, 3, 4, 5], dtype=I32),
            _probs(5, 70, 1) if with_q else None, target, torch.arange(3, dtype=I64), torch.arange(5, dtype=I64)]


def _random_args(with_q=True):
    out, cu, drafts, q, target, seeds, steps = _recovered_args(with_q)
    return [torch.full((3, 4), -1, dtype=I32), cu, drafts, q, target, torch.tensor([7, 8, 9], dtype=I32),
            torch.tensor([9, 8, 7, 6, 5], dtype=I32), seeds, steps, torch.tensor([False, True, False])]


test_opcheck, test_compile = op_contract_tests({
    "rejection_greedy_sample": _greedy_args,
    "rejection_greedy_sample:all_greedy": lambda: _greedy_args()[:5] + [None],
    "sample_recovered_tokens": _recovered_args,
    "sample_recovered_tokens:one_hot": lambda: _recovered_args(False),
    "rejection_random_sample": _random_args,
    "rejection_random_sample:one_hot": lambda: _random_args(False),
})


def test_bad_inputs(values_checked):
    g = _greedy_args()
    op = OPS.rejection_greedy_sample
    raises_naming(TypeError, "output_token_ids", op, g[0].long(), *g[1:])
    raises_naming(ValueError, "output_token_ids", op, torch.empty(2, 4, dtype=I32), *g[1:])
    raises_naming(ValueError, "output_token_ids", op, torch.empty(3, 3, dtype=I32), *g[1:])  # 3 drafts + bonus
    raises_naming(ValueError, "output_token_ids", op, torch.empty(4, 3, dtype=I32).t(), *g[1:])
    raises_naming(TypeError, "cu_num_draft_tokens", op, g[0], g[1].long(), *g[2:])
    raises_naming(ValueError, "cu_num_draft_tokens", op, g[0], torch.tensor([2, 1, 5], dtype=I32), *g[2:])
    raises_naming(ValueError, "cu_num_draft_tokens", op, g[0], torch.tensor([2, 2, 4], dtype=I32), *g[2:])
    raises_naming(ValueError, "cu_num_draft_tokens", op, g[0], torch.tensor([-1, 2, 5], dtype=I32), *g[2:])
    raises_naming(ValueError, "draft_token_ids", op, g[0], g[1], torch.zeros(5, 1, dtype=I32), *g[3:])
    raises_naming(ValueError, "target_argmax", op, *g[:3], g[3][:4], *g[4:])
    raises_naming(TypeError, "target_argmax", op, *g[:3], g[3].long(), *g[4:])
    raises_naming(ValueError, "bonus_token_ids", op, *g[:4], g[4][:2], g[5])
    raises_naming(TypeError, "is_greedy", op, *g[:5], g[5].int())
    raises_naming(ValueError, "is_greedy", op, *g[:5], torch.ones(4, dtype=torch.bool))

    r = _recovered_args()
    op = OPS.sample_recovered_tokens
    raises_naming(ValueError, "recovered_token_ids", op, torch.empty(4, dtype=I32), *r[1:])
    raises_naming(ValueError, "draft_token_ids", op, r[0], r[1], torch.tensor([1, 2, 70, 4, 5], dtype=I32), *r[3:])
    raises_naming(ValueError, "draft_probs", op, *r[:3], r[3][:, :69], *r[4:])
    raises_naming(TypeError, "draft_probs", op, *r[:3], r[3].double(), *r[4:])
    raises_naming(TypeError, "target_probs", op, *r[:4], r[4].half(), *r[5:])
    raises_naming(ValueError, "target_probs", op, *r[:4], r[4][:4], *r[5:])
    raises_naming(ValueError, "target_probs", op, *r[:4], torch.empty(5, 0), *r[5:])
    raises_naming(TypeError, "seeds", op, *r[:5], r[5].int(), r[6])
    raises_naming(ValueError, "steps", op, *r[:6], r[6][:4])

    a = _random_args()
    op = OPS.rejection_random_sample
    raises_naming(ValueError, "draft_token_ids", op, *a[:2], torch.tensor([1, 2, 3, 4, 99], dtype=I32), *a[3:])
    raises_naming(ValueError, "recovered_token_ids", op, *a[:6], a[6][:4], *a[7:])
    raises_naming(ValueError, "bonus_token_ids", op, *a[:5], a[5][:2], *a[6:])
    raises_naming(ValueError, "is_greedy", op, *a[:9], a[9][:2])
    raises_naming(ValueError, "cu_num_draft_tokens", op, a[0], torch.tensor([2, 2, 6], dtype=I32), *a[2:])
    raises_naming(ValueError, "cu_num_draft_tokens", op, torch.empty(0, 4, dtype=I32), torch.empty(0, dtype=I32),
                  *a[2:5], torch.empty(0, dtype=I32), a[6], torch.empty(0, dtype=I64), a[8], torch.empty(0, dtype=torch.bool))
    raises_naming(ValueError, "target_probs", op, *a[:4], a[4].t().contiguous().t(), *a[5:])
