"""Shared by the sampling family's op tests: seeded draws from one processed row, the exact filtered
distribution by sorting (independent of the ops), and the chi-square check of one against the
other; rows holding NaN / ±inf with what the rules allow each to draw."""
import math

import torch

import ascendtile.ops as ak
from opchecks import seeded_generator

I32, I64 = torch.int32, torch.int64
# Fixed seeds make every test deterministic; the chi-square bound is the 1 - 1e-4 quantile, so a
# correct sampler fails a given (distribution, seed set) with probability 1e-4.
Z_1E4 = 3.719


def chi2_bound(df: int) -> float:
    """Wilson-Hilferty approximation of the chi-square quantile at 1 - 1e-4."""
    a = 2 / (9 * df)
    return df * (1 - a + Z_1E4 * math.sqrt(a)) ** 3


def filtered(probs: list[float], top_k: int, top_p: float, min_p: float) -> list[float]:
    """The exact target distribution by sorting (independent of the ops): keep a token when fewer
    than k tokens are strictly above it, when the mass strictly above it (within top-k) is at most
    top_p of the top-k mass, and when p >= min_p * max p."""
    keep = []
    for p in probs:
        above = [q for q in probs if q > p]
        keep.append(top_k == 0 or len(above) < top_k)
    mass = sum(p for p, k in zip(probs, keep) if k)
    keep = [k and sum(q for q, kq in zip(probs, keep) if kq and q > p) <= top_p * mass and p >= min_p * max(probs)
            for p, k in zip(probs, keep)]
    total = sum(p for p, k in zip(probs, keep) if k)
    return [p / total if k else 0.0 for p, k in zip(probs, keep)]


def draw(logits: torch.Tensor, n: int, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, step=0) -> torch.Tensor:
    """n draws (seeds 0..n-1) from one row of logits processed once: filtering is row-local and
    deterministic (tests/kernels/test_sampling.py checks it batched), so only the draws need n
    rows — under the Triton interpreter, filtering a row costs ~20 draws."""
    row = logits.reshape(1, -1).clone()
    one = lambda v, dtype=torch.float32: torch.tensor([v], dtype=dtype)  # noqa: E731
    ak.process_logits(row, one(temperature), one(top_k, I32), one(top_p), one(min_p))
    full = lambda v, dtype=torch.float32: torch.full((n,), v, dtype=dtype)  # noqa: E731
    return ak.sample_tokens(row.expand(n, -1).contiguous(), full(temperature), torch.arange(n, dtype=I64),
                            full(step, I64))


PROBS = [0.3, 0.2, 0.15, 0.12, 0.1, 0.07, 0.04, 0.02]
SETTINGS = [dict(), dict(top_k=3), dict(top_p=0.6), dict(min_p=0.3), dict(top_k=5, top_p=0.7),
            dict(top_k=6, top_p=0.9, min_p=0.2), dict(temperature=0.7, top_p=0.8)]


def check_distribution(setting: dict, n: int) -> None:
    logits = torch.tensor(PROBS).log()
    temperature = setting.get("temperature", 1.0)
    probs = torch.softmax(logits / temperature, 0).tolist()
    target = filtered(probs, setting.get("top_k", 0), setting.get("top_p", 1.0), setting.get("min_p", 0.0))
    counts = torch.bincount(draw(logits, n, **setting).long(), minlength=len(PROBS)).tolist()
    assert all(c == 0 for c, t in zip(counts, target) if t == 0), (counts, target)  # never a filtered token
    kept = [(c, t * n) for c, t in zip(counts, target) if t > 0]
    chi2 = sum((c - e) ** 2 / e for c, e in kept)
    assert chi2 < chi2_bound(max(1, len(kept) - 1)), (counts, target)


NAN, INF = float("nan"), float("inf")
NAN_CHUNK_ROW, INF_ROW = 1, 3  # rows of nonfinite_rows()
INF_TOKENS = [5, 130, 260]


def nonfinite_rows(vocab: int = 300) -> tuple[torch.Tensor, list[set[int]], list[int]]:
    """(rows [7, vocab], the tokens a draw of each row may return, its greedy token): rows over
    several 64-token chunks holding NaN / ±inf, with what the rules (ascendtile/ops/sampling.py)
    allow: never a NaN or -inf token; only +inf tokens, uniformly, in a row holding one; token 0
    in a row without a finite logit. Rows: a NaN inside a chunk; a NaN as the max of chunk 1,
    whose other tokens hold most of the mass; one +inf beside a NaN; three +inf in three chunks;
    -inf everywhere but one token; all -inf; all NaN."""
    base = torch.randn(vocab, generator=seeded_generator(5))
    rows = base.expand(7, -1).clone()
    rows[0, 10] = NAN
    rows[1, 64:128] += 3.0
    rows[1, 70] = NAN
    rows[2, 3], rows[2, 200] = NAN, INF
    rows[3, INF_TOKENS] = INF
    rows[4] = -INF
    rows[4, 170] = 0.5
    rows[5] = -INF
    rows[6] = NAN
    every = set(range(vocab))
    support = [every - {10}, every - {70}, {200}, set(INF_TOKENS), {170}, {0}, {0}]
    greedy = [int(torch.where(rows[i].isnan(), -INF, rows[i]).argmax()) for i in range(2)] + [200, 5, 170, 0, 0]
    return rows, support, greedy


def draws_per_row(rows: torch.Tensor, n: int, temperature: float = 1.0) -> torch.Tensor:
    """sample_tokens of every row with seeds 0..n-1 at step 0, as [rows, n] int64."""
    batch = rows.repeat_interleave(n, 0)
    seeds = torch.arange(n, dtype=I64).repeat(rows.shape[0])
    temps = torch.full((batch.shape[0],), temperature)
    return ak.sample_tokens(batch, temps, seeds, torch.zeros_like(seeds)).long().view(rows.shape[0], n)


def check_uniform(tokens: torch.Tensor, among: list[int]) -> None:
    """Draws (int64) all in `among` and uniform over it (chi-square at the 1 - 1e-4 bound)."""
    counts = torch.bincount(tokens, minlength=max(among) + 1)
    assert int(counts[among].sum()) == tokens.numel(), counts.nonzero()[:, 0].tolist()
    expected = tokens.numel() / len(among)
    assert sum((int(counts[t]) - expected) ** 2 / expected for t in among) < chi2_bound(len(among) - 1)
