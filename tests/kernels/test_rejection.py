"""rejection family: Triton kernels (interpreter) vs the torch references. Greedy verification and
the seeded acceptance agree exactly (the uniform is the same bits on both paths); the recovered
draw differs by path (Gumbel-max vs inverse CDF), so the kernel's draw is checked on its own:
its distribution, its support, the edge rules and batch independence."""
import pytest
import torch

from opchecks import kernel_path, run_both, seeded_generator
from ops._rejection import ACCEPT_SALT, RECOVER_SALT, check_draws, cu_of, residual, sparse_probs

import ascendtile.kernels.rejection as rejection_kernels

OPS = torch.ops.ascend
I32, I64 = torch.int32, torch.int64


@pytest.fixture
def small_blocks(monkeypatch):
    """Kernel chunks of 128 tokens: a 203-token row spans two, the second partial (the interpreter
    spends ~5 ms per position and ~2 ms per chunk, so distribution tests keep both few)."""
    monkeypatch.setattr(rejection_kernels, "BLOCK", 128)


def test_salts_match_the_reference():
    assert (rejection_kernels.ACCEPT_SALT.value, rejection_kernels.RECOVER_SALT.value) == (ACCEPT_SALT, RECOVER_SALT)


def _batch(vocab: int, seed: int):
    counts = [3, 0, 5, 1, 2, 4, 0]
    tokens = sum(counts)
    generator = seeded_generator(seed)
    target = torch.softmax(torch.randn(tokens, vocab + 3, generator=generator) * 2, -1)[:, :vocab]  # strided rows
    q = torch.softmax(torch.randn(tokens, vocab, generator=generator) * 2, -1)
    drafts = torch.multinomial(q, 1, generator=generator)[:, 0].int()
    drafts[:3] = target[:3].argmax(-1).int()
    drafts[5] = -1
    q[9, drafts[9]] = 0.0
    return dict(
        counts=counts, cu=cu_of(counts), drafts=drafts, q=q, target=target,
        argmax=torch.where(torch.rand(tokens, generator=generator) < 0.7, drafts, (drafts + 1) % vocab).int(),
        bonus=torch.arange(300, 307, dtype=I32), recovered=torch.randint(vocab, (tokens,), dtype=I32, generator=generator),
        seeds=torch.tensor([3, -1, 2**50, 8, 0, 41, 9], dtype=I64), steps=torch.arange(tokens, dtype=I64) + 17,
        greedy=torch.tensor([True, False, False, True, False, False, True]))


@pytest.mark.parametrize("all_greedy", [False, True])
def test_greedy(all_greedy):
    b = _batch(50, 0)
    out = torch.full((7, 6), 12345, dtype=I32)
    run_both(OPS.rejection_greedy_sample, [out, b["cu"], b["drafts"], b["argmax"], b["bonus"],
                                           None if all_greedy else b["greedy"]], mutated=[0], exact=True)


@pytest.mark.parametrize("with_q", [False, True])
def test_random_acceptance(with_q):
    """The same accept decisions on both paths (V 1037: the kernel reads p(x), q(x) by scalar loads)."""
    b = _batch(1037, 1)
    out = torch.full((7, 6), 12345, dtype=I32)
    args = [out, b["cu"], b["drafts"], b["q"] if with_q else None, b["target"], b["bonus"], b["recovered"], b["seeds"],
            b["steps"], b["greedy"]]
    run_both(OPS.rejection_random_sample, args, mutated=[0], exact=True)
    with kernel_path("triton"):
        OPS.rejection_random_sample(*args)
    assert (out[b["greedy"]] == 12345).all() and not (out[~b["greedy"]] == 12345).any()


def test_random_acceptance_many_seeds_agree():
    """Near p(x)/q(x) ~ u many decisions fall either way: 120 requests, both paths equal."""
    n, vocab = 120, 8
    target = torch.softmax(torch.randn(n, vocab), -1)
    q = torch.softmax(torch.randn(n, vocab), -1)
    drafts = torch.randint(vocab, (n,), dtype=I32)
    args = [torch.full((n, 2), 7, dtype=I32), torch.arange(1, n + 1, dtype=I32), drafts, q, target,
            torch.full((n,), 5, dtype=I32), torch.zeros(n, dtype=I32), torch.arange(n, dtype=I64) * 7919,
            torch.arange(n, dtype=I64), torch.zeros(n, dtype=torch.bool)]
    run_both(OPS.rejection_random_sample, args, mutated=[0], exact=True)
    with kernel_path("triton"):
        OPS.rejection_random_sample(*args)
    accepted = float((args[0][:, 0] == drafts).double().mean())
    assert 0.2 < accepted < 0.9, accepted  # both outcomes occur


def _draw_residual(with_q: bool, n: int) -> None:
    p = sparse_probs(203, 1.0, seed=7, every=29)  # 7 tokens, in both chunks
    q = sparse_probs(203, 1.0, seed=8, every=3) if with_q else None
    draft = int(p.argmax())
    tokens = torch.empty(n, dtype=I32)
    OPS.sample_recovered_tokens(tokens, torch.tensor([n // 2, n], dtype=I32), torch.full((n,), draft, dtype=I32),
                                None if q is None else q.expand(n, -1), p.expand(n, -1),
                                torch.tensor([11, 12], dtype=I64), torch.arange(n, dtype=I64))
    check_draws(tokens.long(), residual(p, q, draft))


def test_recovered_draw_follows_residual(small_blocks, triton_path):
    _draw_residual(True, 400)


@pytest.mark.slow
def test_recovered_draw_follows_residual_one_hot(small_blocks, triton_path):
    _draw_residual(False, 400)


@pytest.mark.slow
def test_first_token_follows_target(small_blocks, triton_path):
    """The kernels end to end, a one-hot draft at temperature 0.7: the emitted token ~ p."""
    p = sparse_probs(203, 0.7, seed=3, every=29)
    n = 400
    target = p.expand(n, -1)
    drafts = torch.full((n,), int(p.argmax()), dtype=I32)
    cu, seeds, steps = torch.arange(1, n + 1, dtype=I32), torch.arange(n, dtype=I64), torch.full((n,), 4, dtype=I64)
    recovered = torch.empty(n, dtype=I32)
    OPS.sample_recovered_tokens(recovered, cu, drafts, None, target, seeds, steps)
    out = torch.empty(n, 2, dtype=I32)
    OPS.rejection_random_sample(out, cu, drafts, None, target, torch.zeros(n, dtype=I32), recovered, seeds, steps,
                                torch.zeros(n, dtype=torch.bool))
    check_draws(out[:, 0].long(), p.double())


def test_recovered_support_edges_and_batch_independence(triton_path):
    """Over 1500 tokens (two 1024 chunks, a tail): every draw has p - q > 0; the edge rules of
    ascendtile/ops/rejection.py; a position's draw is the same alone and in a batch."""
    vocab, tokens = 1500, 9
    generator = seeded_generator(2)
    p = torch.softmax(torch.randn(tokens, vocab, generator=generator) * 3, -1)
    q = torch.softmax(torch.randn(tokens, vocab, generator=generator) * 3, -1)
    drafts = torch.randint(vocab, (tokens,), dtype=I32, generator=generator)
    p[6], q[6] = 0.0, 0.0
    p[6, 1400] = q[6, 1400] = 1.0  # no positive residual: the draft
    drafts[6] = 1400
    p[7] = q[7]  # p == q: the draft
    p[8], q[8] = 0.0, 0.0  # a padded draft of a p without mass: 0
    drafts[8] = -1
    cu, seeds, steps = torch.tensor([4, 4, 9], dtype=I32), torch.tensor([5, 6, 7], dtype=I64), torch.arange(tokens, dtype=I64)
    out = torch.empty(tokens, dtype=I32)
    OPS.sample_recovered_tokens(out, cu, drafts, q, p, seeds, steps)
    picked = out.long()
    assert ((p - q)[torch.arange(6), picked[:6]] > 0).all()
    assert picked[6:].tolist() == [1400, int(drafts[7]), 0]
    alone = torch.empty(1, dtype=I32)
    OPS.sample_recovered_tokens(alone, torch.tensor([1], dtype=I32), drafts[5:6], q[5:6], p[5:6], seeds[2:3], steps[5:6])
    assert int(alone[0]) == int(out[5])
    one_hot = torch.empty(tokens, dtype=I32)
    p[0] = 0.0
    p[0, int(drafts[0])], p[0, 3] = 0.5, 0.5  # one-hot q zeros the draft: only token 3 is left
    OPS.sample_recovered_tokens(one_hot, cu, drafts, None, p, seeds, steps)
    assert int(one_hot[0]) == 3 and one_hot[6] == 1400


def test_out_of_range_spans_are_clamped():
    """On NPU/CUDA the validators cannot read cu (a host sync), so the kernels clamp each span to
    [0, T) and to its row (launched directly here: on CPU the op's validator refuses them first).
    A draft id >= V is rejected, zeroing nothing."""
    drafts = torch.tensor([1, 2, 3, 99], dtype=I32)
    target = torch.full((4, 8), 1 / 8)
    target[2] = torch.nn.functional.one_hot(torch.tensor(3), 8)
    cu = torch.tensor([2, 9, -4], dtype=I32)  # request 1 runs past T, request 2 goes backwards
    out = torch.full((3, 3), 77, dtype=I32)
    rejection_kernels.rejection_greedy_sample(out, cu, drafts, drafts, torch.tensor([5, 6, 7], dtype=I32), None)
    assert out.tolist() == [[1, 2, 5], [3, 99, 6], [7, -1, -1]]  # request 1: drafts 2..3 of T = 4, then its bonus
    out.fill_(77)
    recovered = torch.tensor([40, 41, 42, 43], dtype=I32)
    rejection_kernels.rejection_random_sample(out, torch.tensor([2, 4, 4], dtype=I32), drafts, None, target,
                                              torch.tensor([5, 6, 7], dtype=I32), recovered,
                                              torch.zeros(3, dtype=I64), torch.zeros(4, dtype=I64),
                                              torch.zeros(3, dtype=torch.bool))
    assert out[1].tolist() == [3, 43, -1]  # draft 3 (p = 1) accepted, draft 99 >= V rejected: its recovered token
