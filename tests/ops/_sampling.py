"""Shared by the sampling family's op tests: seeded draws from one processed row, the exact filtered
distribution by sorting (independent of the ops), and the chi-square check of one against the
other."""
import math

import torch

import ascendkit.ops as ak

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
