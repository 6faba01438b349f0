"""sampling family: Triton kernels (interpreter) vs the torch references. The references find
filter thresholds from a candidate set (or a radix select when it cannot decide), the kernels
always bisect: the kept sets must agree exactly. The paths draw differently (test_sample_tokens)."""
import pytest
import torch

from opchecks import kernel_path, run_both
from tolerances import exact_tolerance
from ops._sampling import INF_ROW, INF_TOKENS, NAN_CHUNK_ROW, check_uniform, draws_per_row, nonfinite_rows

import ascendtile.kernels.sampling as sampling_kernels
from ascendtile.ops.sampling import SAMPLING_EPS

OPS = torch.ops.ascend
I32 = torch.int32
# The interpreter's numpy warns on the inf - inf the kernels compute (and discard) on +inf rows.
INF_MINUS_INF = pytest.mark.filterwarnings("ignore:invalid value encountered in subtract:RuntimeWarning")


@pytest.fixture
def small_blocks(monkeypatch):
    """Kernel chunks of 64 tokens: nonfinite_rows() then spans five, so the kernels combine a
    NaN, +inf or -inf chunk with the others (launchers read BLOCK per call)."""
    monkeypatch.setattr(sampling_kernels, "BLOCK", 64)


def _params(rows: int, vocab: int):
    """A mix per batch: greedy, temperature only, top-k (small, and past the reference's 128
    candidates), top-p (narrow, and wider than the candidates), min-p, and combinations."""
    temps = torch.tensor([0.0, 0.7, 1.0, 1.3, 0.9, 1.0, 2.0, 0.5, 1.0, 5.0])[:rows]
    top_k = torch.tensor([0, 0, 5, 0, 300, 3, 40, 0, 0, 0], dtype=I32)[:rows].clamp(max=vocab)
    top_p = torch.tensor([1.0, 1.0, 1.0, 0.8, 1.0, 0.5, 0.9, 1.0, 0.95, 0.99])[:rows]
    min_p = torch.tensor([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.05, 0.2, 0.0, 0.0])[:rows]
    return temps, top_k, top_p, min_p


@pytest.mark.parametrize("vocab", [37, 3000])  # one padded chunk; two chunks with a tail
def test_process_logits(vocab):
    logits = torch.randn(10, vocab + 5)[:, :vocab] * 4  # strided rows
    logits[9] = torch.randn(vocab) * 0.01  # nearly flat: the nucleus is wider than the candidates
    run_both(OPS.process_logits, [logits, *_params(10, vocab)], mutated=[0], exact=True)


def test_process_logits_boundary_ties():
    logits = torch.tensor([[3.0, 2.0, 2.0, 2.0, 1.0, 0.0]] * 3)
    top_k = torch.tensor([2, 0, 0], dtype=I32)
    top_p = torch.tensor([1.0, 0.5, 1.0])
    # min-p at e^-1 - 1e-4: an exact e^-1 would compare torch's exp with numpy's (the interpreter).
    min_p = torch.tensor([0.0, 0.0, 0.3678])
    args = [logits, torch.ones(3), top_k, top_p, min_p]
    run_both(OPS.process_logits, args, mutated=[0], exact=True)


@pytest.mark.parametrize("vocab", [37, 3000])
def test_sample_tokens(vocab):
    # The paths draw differently (kernel: Gumbel-max; reference: inverse CDF), so compare what
    # both promise: greedy rows take the same argmax, every draw is a kept token, and a row's
    # draw does not change when the rest of the batch does.
    logits = torch.randn(10, vocab) * 2
    temps, top_k, top_p, min_p = _params(10, vocab)
    OPS.process_logits(logits, temps, top_k, top_p, min_p)
    seeds = torch.tensor([0, 1, -1, 2**40 + 3, 7, 7, 123456789, -2**62, 5, 11])
    steps = torch.arange(10, dtype=torch.int64) * 1000
    with kernel_path("triton"):
        tri = torch.empty(10, dtype=I32)
        OPS.sample_tokens(tri, logits, temps, seeds, steps)
        alone = torch.empty(1, dtype=I32)
        OPS.sample_tokens(alone, logits[3:4], temps[3:4], seeds[3:4], steps[3:4])
    greedy = temps == 0
    assert torch.equal(tri[greedy], logits[greedy].argmax(-1).int())
    assert torch.isfinite(logits.gather(1, tri.long()[:, None])).all()
    assert int(alone[0]) == int(tri[3])


@INF_MINUS_INF
def test_process_logits_nonfinite_rows_and_tiny_temperatures(small_blocks):
    """The rules of ascendtile/ops/sampling.py on both paths: the NaN / ±inf rows filtered (NaN ->
    -inf, +inf rows keep exactly their +inf tokens) and only scaled (left NaN and inf), and
    temperatures just below, at and far below SAMPLING_EPS."""
    assert sampling_kernels.SAMPLING_EPS.value == SAMPLING_EPS
    rows, _, _ = nonfinite_rows()
    logits = torch.cat([rows, rows, torch.randn(3, 300) * 3])
    temps = torch.tensor([0.7] * 7 + [0.5] * 7 + [1e-38, 9.99e-6, 1e-5])
    top_k = torch.tensor([20, 0, 5, 0, 3, 7, 0] + [0] * 7 + [0, 5, 5], dtype=I32)
    top_p = torch.tensor([1.0, 0.8, 1.0, 0.9, 1.0, 0.5, 1.0] + [1.0] * 7 + [0.9] * 3)
    min_p = torch.tensor([0.0, 0.0, 0.1, 0.0, 0.0, 0.0, 0.2] + [0.0] * 10)
    with kernel_path("reference"):
        ref = logits.clone()
        OPS.process_logits(ref, temps, top_k, top_p, min_p)
    with kernel_path("triton"):
        tri = logits.clone()
        OPS.process_logits(tri, temps, top_k, top_p, min_p)
    torch.testing.assert_close(tri, ref, **exact_tolerance(ref.dtype), equal_nan=True)
    assert not ref[:7].isnan().any() and ref[7:14].isnan().any() and torch.isfinite(ref[14:16]).all()


def test_sample_tokens_nonfinite_rows(triton_path, small_blocks):
    """The kernel's draw (Gumbel-max) by the same rules as the reference: never a NaN or -inf
    token, a chunk whose max is NaN still drawn, +inf tokens uniformly (greedy: the first), rows
    of -inf or NaN token 0, a tiny temperature greedy."""
    rows, support, greedy = nonfinite_rows()
    zeros = torch.zeros(7, dtype=torch.int64)
    for temperature in (0.0, 1e-38):
        tokens = torch.empty(7, dtype=I32)
        OPS.sample_tokens(tokens, rows, torch.full((7,), temperature), zeros, zeros)
        assert tokens.tolist() == greedy, temperature
    draws = draws_per_row(rows, 4)
    for i, allowed in enumerate(support):
        assert set(draws[i].tolist()) <= allowed, i
    nan_chunk, infinite = draws_per_row(rows[[NAN_CHUNK_ROW, INF_ROW]], 40)  # the rows with a choice to check
    assert float((nan_chunk // 64 == 1).double().mean()) > 0.5 and set(nan_chunk.tolist()) <= support[NAN_CHUNK_ROW]
    check_uniform(infinite, INF_TOKENS)


@INF_MINUS_INF
def test_gather_logprobs_nonfinite_rows(small_blocks):
    rows, _, _ = nonfinite_rows()
    tokens = torch.tensor([10, 64, 200, 130, 170, 4, 4], dtype=I32)
    args = [torch.empty(7, 5), torch.empty(7, 5, dtype=I32), rows, torch.arange(7, dtype=I32), tokens]
    run_both(OPS.gather_logprobs, args, mutated=[0, 1], rtol=1.3e-6, atol=1e-5)


def test_penalties_and_counts():
    vocab, slots = 2100, 6
    counts = torch.randint(0, 3, (slots, vocab), dtype=I32) * (torch.rand(slots, vocab) < 0.1)
    prompt = (torch.rand(slots, vocab) < 0.05).to(torch.int8)
    rows = torch.tensor([4, -1, 0, 2], dtype=I32)
    logits = torch.randn(4, vocab + 3)[:, :vocab]
    penalties = [torch.tensor([1.3, 2.0, 1.0, 0.7]), torch.tensor([0.5, 1.0, 0.0, -0.3]), torch.tensor([0.2, 1.0, 1.5, 0.0])]
    run_both(OPS.apply_penalties, [logits, counts, prompt, rows, *penalties], mutated=[0])
    tokens = torch.tensor([5, 9, 2099, 5], dtype=I32)
    run_both(OPS.update_token_counts, [counts, rows, tokens], mutated=[0])


def test_gather_logprobs():
    logits = torch.randn(6, 2500)
    logits[3, 100:110] = 9.0  # ties in the top-n: ordered by id
    logits[4, 7:] = float("-inf")  # fewer finite tokens than n
    rows = torch.tensor([5, 3, 4, 0], dtype=I32)
    tokens = torch.tensor([1, 2, 3, 105, 4, 2499], dtype=I32)
    args = [torch.empty(4, 13), torch.empty(4, 13, dtype=I32), logits, rows, tokens]
    run_both(OPS.gather_logprobs, args, mutated=[0, 1], rtol=1.3e-6, atol=1e-5)


def test_out_of_range_indices_are_skipped():
    """On NPU/CUDA the validators cannot read indices (a host sync), so the kernels skip any outside
    its table (launched directly here: on CPU the op's validator refuses them first). A count row
    or token outside the table: no penalty, no count; a logprob row or its token outside logits:
    that output row is left as it was. The rows around the counts table keep their sentinel."""
    vocab, slots, guard = 300, 3, 2
    buf = torch.full((slots + 2 * guard, vocab), -7, dtype=I32)
    counts = buf[guard:guard + slots]
    counts.zero_()
    prompt = torch.zeros(slots, vocab, dtype=torch.int8)
    count_rows = torch.tensor([0, slots, -2, 2], dtype=I32)  # rows 1 and 2 point outside the table
    tokens = torch.tensor([5, 6, 7, vocab], dtype=I32)  # row 3's token is outside the vocabulary
    sampling_kernels.update_token_counts(counts, count_rows, tokens)
    assert (buf[:guard] == -7).all() and (buf[guard + slots:] == -7).all()
    expected = torch.zeros(slots, vocab, dtype=I32)
    expected[0, 5] = 1
    assert torch.equal(counts, expected)

    logits = torch.randn(4, vocab)
    before = logits.clone()
    ones = torch.ones(4)
    sampling_kernels.apply_penalties(logits, counts, prompt, count_rows, ones * 2, ones, ones)
    assert torch.equal(logits[1:3], before[1:3])  # out-of-table count rows: untouched
    assert logits[0, 5] != before[0, 5] and torch.equal(logits[0, :5], before[0, :5])

    logprobs, ids = torch.full((4, 3), 5.0), torch.full((4, 3), -9, dtype=I32)
    rows = torch.tensor([0, 4, -1, 3], dtype=I32)  # 4 and -1 are outside logits; row 3's token too
    sampling_kernels.gather_logprobs(logprobs, ids, before, rows, tokens)
    assert (logprobs[1:] == 5.0).all() and (ids[1:] == -9).all()
    torch.testing.assert_close(logprobs[0, 0], torch.log_softmax(before[0], -1)[5])
    assert int(ids[0, 0]) == 5
