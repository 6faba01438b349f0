"""The sampling references' fast paths against their fallbacks (the op contract is
tests/ops/test_sampling.py): process_logits from the candidates vs the radix select and full-row
mask (forced by shrinking the candidate set), sample_tokens over the live chunks vs the whole row
(forced by LIVE = -1), the chunked greedy argmax vs torch.argmax; the fallback's draws follow the
exact filtered distribution."""
import pytest
import torch

import ascendtile.ops as ak
from ascendtile.ops.reference import _sampling_draw, _sampling_filter
from opchecks import seeded_generator
from ops._sampling import SETTINGS, check_distribution

# The references' own paths: on a GPU too (tests/conftest.py), where the ops run the kernels by default.
pytestmark = pytest.mark.usefixtures("reference_path")

I32, I64 = torch.int32, torch.int64


@pytest.fixture
def radix_rows(monkeypatch) -> list[int]:
    """How many rows each radix select (the fallback threshold search) was given."""
    calls, real = [], _sampling_filter.radix_select
    monkeypatch.setattr(_sampling_filter, "radix_select", lambda e, *args: calls.append(e.shape[0]) or real(e, *args))
    return calls


@pytest.fixture
def located_widths(monkeypatch) -> list[int]:
    """The row width of each inverse-CDF search (the vocabulary, padded, on the whole-row path)."""
    calls, real = [], _sampling_draw._locate
    monkeypatch.setattr(_sampling_draw, "_locate",
                        lambda chunks, *args: calls.append(chunks[0].numel()) or real(chunks, *args))
    return calls


def _batch(vocab: int = 4000):
    """Peaked rows (small nuclei, as a model's) with every filter, greedy and temperature-only rows."""
    logits = torch.randn(10, vocab, generator=seeded_generator(0)) * 5
    temps = torch.tensor([1.0, 0.8, 1.0, 0.7, 1.2, 1.0, 0.9, 0.0, 1.0, 0.6])
    top_k = torch.tensor([0, 20, 7, 0, 50, 0, 30, 5, 0, 0], dtype=I32)
    top_p = torch.tensor([0.9, 0.8, 1.0, 1.0, 1.0, 0.95, 0.99, 0.5, 1.0, 0.7])
    min_p = torch.tensor([0.0, 0.0, 0.0, 0.05, 0.01, 0.0, 0.02, 0.0, 0.0, 0.1])
    return logits, temps, top_k, top_p, min_p


def _processed(logits, *params) -> torch.Tensor:
    out = logits.clone()
    ak.process_logits(out, *params)
    return out


def test_candidates_and_radix_select_keep_the_same_tokens(monkeypatch, radix_rows):
    logits, *params = _batch()
    fast = _processed(logits, *params)
    assert radix_rows == []  # every threshold from the 128 candidates, every row rewritten from them
    monkeypatch.setattr(_sampling_filter, "CANDIDATES", 2)
    slow = _processed(logits, *params)
    assert sum(radix_rows) >= 5  # the top-p rows and the top-k rows past 2 took the radix select
    assert torch.equal(fast, slow)


def test_mixed_batch_rows_match_their_single_row_results(radix_rows):
    # A flat row (nucleus past the candidates: radix select and full-row mask) beside peaked rows
    # (rewritten from the candidates) gives each row what it gets alone.
    logits, *params = _batch()
    logits[2] = torch.randn(logits.shape[1]) * 0.01
    params[1][2], params[2][2] = 0, 0.9
    batch = _processed(logits, *params)
    assert radix_rows == [1]
    for row in range(logits.shape[0]):
        alone = _processed(logits[row:row + 1], *(p[row:row + 1] for p in params))
        assert torch.equal(batch[row:row + 1], alone), row


def test_live_chunks_and_whole_row_draw_the_same_tokens(monkeypatch, located_widths):
    logits, temps, *filters = _batch(10000)  # past LIVE = 128 chunks of 64: row 8 (no filter) is wide
    processed = _processed(logits, temps, *filters)
    rows = processed.repeat(20, 1)  # every row drawn with 20 seeds
    temps = temps.repeat(20)
    seeds, steps = torch.arange(rows.shape[0], dtype=I64) * 7919, torch.arange(rows.shape[0], dtype=I64) % 3
    fast = ak.sample_tokens(rows, temps, seeds, steps)
    assert located_widths[0] < 10000 and located_widths[1:] == [10048]  # live chunks, then row 8
    monkeypatch.setattr(_sampling_draw, "LIVE", -1)
    located_widths.clear()
    slow = ak.sample_tokens(rows, temps, seeds, steps)
    assert located_widths == [10048]  # 10000 padded to 157 chunks of 64: whole rows
    assert torch.equal(fast, slow)
    assert torch.isfinite(rows.gather(1, fast.long()[:, None])).all()


@pytest.mark.parametrize("vocab", [1000, 4096])  # padded to chunks, and chunks exactly
def test_greedy_chunked_argmax_matches_argmax(vocab):
    logits = torch.randn(6, vocab)
    logits[1, [5, vocab - 3]] = 9.0  # tie across chunks: the lowest id
    logits[2, [130, 131]] = 9.0  # tie inside one chunk
    logits[3] = float("-inf")  # no finite logit: id 0, as argmax
    logits[4, [vocab - 1]] = 9.0  # the last token (in the padded chunk for 1000)
    logits[5, 700] = float("nan")  # NaN reads as -inf (not as the max, which torch.argmax makes it)
    tokens = ak.sample_tokens(logits, torch.zeros(6), torch.zeros(6, dtype=I64), torch.zeros(6, dtype=I64))
    expected = logits.nan_to_num(nan=float("-inf")).argmax(-1)
    assert tokens.tolist() == expected.tolist() == [tokens[0].item(), 5, 130, 0, vocab - 1, expected[5].item()]
    assert expected[5] != 700 and logits.argmax(-1)[5] == 700


@pytest.mark.parametrize("setting", [s for s in SETTINGS if "top_p" in s or "top_k" in s], ids=str)
def test_radix_fallback_follows_the_filtered_distribution(setting, monkeypatch, radix_rows):
    monkeypatch.setattr(_sampling_filter, "CANDIDATES", 2)  # thresholds past 2 tokens: the fallback
    check_distribution(setting, 20000)
    assert radix_rows


@pytest.mark.parametrize("vocab", [4096, 4000])  # the grouped scan of seen tokens, and the whole-row scan
def test_penalties_on_seen_tokens_match_the_dense_formula(vocab):
    gen = seeded_generator(vocab)
    slots, rows = 6, torch.tensor([4, -1, 0, 2, 5], dtype=I32)
    counts = torch.randint(0, 3, (slots, vocab), dtype=I32, generator=gen)
    counts *= torch.rand(slots, vocab, generator=gen) < 0.01
    prompt = (torch.rand(slots, vocab, generator=gen) < 0.01).to(torch.int8)
    counts[5, vocab - 1], prompt[2, 0] = 4, 1  # the last token of the last group, the first of the first
    logits = torch.randn(5, vocab, generator=gen) * 3
    rep, freq, pres = torch.tensor([1.3, 2.0, 0.7, 1.1, 1.6]), torch.tensor([0.5, 1.0, -0.3, 0.2, 0.0]), \
        torch.tensor([0.2, 1.0, 0.0, 1.5, -0.4])
    got = ak.apply_penalties(logits.clone(), counts, prompt, rows, rep, freq, pres)
    slot = rows.clamp(min=0).long()
    count = counts[slot].float()
    seen = ((count > 0) | (prompt[slot] > 0)) & (rows >= 0)[:, None]
    x = torch.where(logits > 0, logits / rep[:, None], logits * rep[:, None])
    x = x - freq[:, None] * count - pres[:, None] * (count > 0).float()
    torch.testing.assert_close(got, torch.where(seen, x, logits), rtol=1e-6, atol=1e-6)
