"""Shared by the rejection family's tests: a batch builder, loop references written from the rules
in ascendtile/ops/rejection.py (plain Python, one request and one draft at a time; the acceptance
uniform's hash re-derived on Python ints), and the chi-square check of draws against a
distribution."""
import torch

from opchecks import seeded_generator
from ops._sampling import chi2_bound

I32, I64 = torch.int32, torch.int64
MASK32 = 0xFFFFFFFF
ACCEPT_SALT = 0x6A09E667  # the documented salts, restated
RECOVER_SALT = 0x3C6EF372
STEP_SALT = 0x2545F491


def fmix32(h: int) -> int:
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & MASK32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & MASK32
    return h ^ (h >> 16)


def accept_uniform(seed: int, step: int) -> float:
    """(the top 23 bits of the salted key + 0.5) / 2^23: exact as a float."""
    seed &= (1 << 64) - 1
    key = fmix32((seed & MASK32) ^ fmix32((seed >> 32) ^ fmix32((step & MASK32) ^ ACCEPT_SALT)))
    return ((key >> 9) + 0.5) / (1 << 23)


def cu_of(counts: list[int]) -> torch.Tensor:
    return torch.tensor(counts, dtype=I32).cumsum(0).to(I32)


def split(values: list, counts: list[int]) -> list[list]:
    out, at = [], 0
    for n in counts:
        out.append(values[at:at + n])
        at += n
    return out


def greedy_rows(counts, drafts, argmax, bonus, width, greedy, before):
    """The expected output rows of rejection_greedy_sample; rows not greedy keep `before`."""
    rows = []
    for r, (d, t) in enumerate(zip(split(drafts, counts), split(argmax, counts))):
        if not greedy[r]:
            rows.append(before[r])
            continue
        row = []
        for x, y in zip(d, t):
            row.append(y)
            if x != y:
                break
        else:
            row.append(bonus[r])
        rows.append(row + [-1] * (width - len(row)))
    return rows


def accepted(draft: int, p_row: torch.Tensor, q_row: torch.Tensor | None, u: float) -> bool:
    """min(1, p/q) acceptance as documented: q(x) > 0 and u·q(x) < p(x) in fp32 (q one-hot: 1)."""
    if draft < 0 or draft >= p_row.shape[0]:
        return False
    p = p_row[draft].item()
    q = 1.0 if q_row is None else q_row[draft].item()
    product = (torch.tensor(u, dtype=torch.float32) * torch.tensor(q, dtype=torch.float32)).item()
    return q > 0 and product < p


def random_rows(counts, drafts, target, draft_probs, bonus, recovered, seeds, steps, width, greedy, before):
    """The expected output rows of rejection_random_sample; greedy rows keep `before`."""
    rows, at = [], 0
    for r, n in enumerate(counts):
        span = range(at, at + n)
        at += n
        if greedy[r]:
            rows.append(before[r])
            continue
        row = []
        for i in span:
            q_row = None if draft_probs is None else draft_probs[i]
            if accepted(drafts[i], target[i], q_row, accept_uniform(seeds[r], steps[i])):
                row.append(drafts[i])
            else:
                row.append(recovered[i])
                break
        else:
            row.append(bonus[r])
        rows.append(row + [-1] * (width - len(row)))
    return rows


def check_draws(tokens: torch.Tensor, probs: torch.Tensor) -> None:
    """Draws (int64 [n]) never outside the support of probs (fp64 [V], sums to 1) and distributed
    like it (chi-square at the 1 - 1e-4 bound)."""
    counts = torch.bincount(tokens, minlength=probs.shape[0]).double()
    support = probs > 0
    assert int(counts[~support].sum()) == 0, (~support & (counts > 0)).nonzero()[:, 0].tolist()
    expected = probs[support] * tokens.numel()
    assert float(expected.min()) >= 5, "too few draws for the chi-square test"
    chi2 = float(((counts[support] - expected) ** 2 / expected).sum())
    assert chi2 < chi2_bound(int(support.sum()) - 1), chi2


def sparse_probs(vocab: int, temperature: float, seed: int, every: int = 9) -> torch.Tensor:
    """softmax(logits / temperature) fp32 [vocab] over the tokens 2, 2 + every, ... (spread over
    every chunk), 0 elsewhere: a processed (top-k'd) target row."""
    logits = torch.full((vocab,), float("-inf"))
    kept = torch.arange(2, vocab, every)
    logits[kept] = torch.randn(kept.shape[0], generator=seeded_generator(seed)) * 0.5
    return torch.softmax(logits / temperature, 0)


def residual(p: torch.Tensor, q: torch.Tensor | None, draft: int) -> torch.Tensor:
    """normalize(max(p - q, 0)) in fp64 (q None: one-hot at draft)."""
    p = p.double()
    r = p.clone()
    if q is None:
        if 0 <= draft < p.shape[0]:
            r[draft] = 0.0
    else:
        r = (p - q.double()).clamp(min=0)
    return r / r.sum()
