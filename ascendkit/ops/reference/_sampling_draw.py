"""The draw of the sampling reference (sample_tokens' CPU path): greedy argmax and the seeded
inverse-CDF draw, both from a row's CHUNK-wide chunk maxima (one vectorised pass; torch's argmax
and topk are scalar loops, ~10x slower over a row).

A draw takes one uniform u per row, hashed from (seed, step), and picks the first token whose
prefix sum of e = exp(y - max y) (below 2^-125: 0), in vocabulary order, exceeds u * sum(e). torch's CPU cumsum is
one sequential pass with a float64 accumulator, so tokens with e = 0 (filtered, -inf) leave every
prefix sum as it was: the prefix sums over only the chunks holding a finite logit are, bit for
bit, the full row's at those tokens. A row with at most LIVE such chunks (process_logits leaves a
narrow nucleus in a few chunks) draws from them alone; a wider row scans the whole row. Both
give the same token for the same seed. Everything is row-local, so a seeded row draws the same
token whatever the batch.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

CHUNK = 64
LIVE = 128  # a row with at most this many chunks holding a finite logit draws from those alone
EXP_FLOOR, FLUSH = -87.0, 2.0**-125  # exp(-87) ~ 1.6e-38 < FLUSH ~ 2.4e-38: normal fp32, flushed
_MASK32 = 0xFFFFFFFF
_MIX1, _MIX2, _STEP_SALT = 0x85EBCA6B, 0xC2B2AE35, 0x2545F491


def _fmix32(h: torch.Tensor) -> torch.Tensor:
    """murmur3's finaliser on int64 tensors holding 32-bit values (kernels/_rng.py on int32)."""
    h = h ^ (h >> 16)
    h = (h * _MIX1) & _MASK32
    h = h ^ (h >> 13)
    h = (h * _MIX2) & _MASK32
    return h ^ (h >> 16)


def row_keys(seeds: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
    """Per-row 32-bit keys (int64 [n]) from int64 seeds and steps [n], as kernels/_rng.row_key."""
    lo, hi = seeds & _MASK32, (seeds >> 32) & _MASK32
    return _fmix32(lo ^ _fmix32(hi ^ _fmix32((steps & _MASK32) ^ _STEP_SALT)))


def uniforms(seeds: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
    """One uniform in (0, 1) per row (fp64 [n], exact) from the top 24 bits of its key."""
    return ((row_keys(seeds, steps) >> 8).to(torch.float64) + 0.5) / (1 << 24)


def chunked(y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(chunks [n, m, CHUNK], their maxima [n, m]) of fp32 rows y [n, vocab]; a vocabulary that
    CHUNK does not divide is padded with -inf (a copy), a view otherwise."""
    if y.shape[1] % CHUNK or not y.is_contiguous():
        y = F.pad(y, (0, -y.shape[1] % CHUNK), value=float("-inf"))
    chunks = y.view(y.shape[0], -1, CHUNK)
    return chunks, chunks.amax(-1)


def argmax(chunks: torch.Tensor, maxima: torch.Tensor) -> torch.Tensor:
    """Each row's argmax (int64 [n]) from chunked(): the first chunk holding the row's max, then
    the first index in it, so ties go to the lowest id (and NaN counts as the max, as in argmax)."""
    chunk = maxima.argmax(-1)
    within = chunks[torch.arange(chunks.shape[0], device=chunks.device), chunk].argmax(-1)
    return chunk * CHUNK + within


def _locate(y: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Per row of y [n, w] (fp32, finite or -inf), the first position whose prefix sum of
    e = exp(y - max y) exceeds u [n] (fp64) times the total. The target stays below the total
    whatever the rounding, so the pick has e > 0."""
    # exp of -inf (the filtered tokens) or of results below fp32's normal range is ~5-50x slower
    # than of the rest on CPU: clamp first, then flush e < FLUSH to 0 (a weight no 24-bit
    # uniform can reach: the target is at least 2^-25 of a total >= 1).
    e = F.threshold_((y - y.amax(-1, keepdim=True)).clamp_(min=EXP_FLOOR).exp_(), FLUSH, 0.0)
    cum = e.cumsum(-1)
    total = cum[:, -1:]
    target = torch.minimum((u[:, None] * total.double()).float(), total.nextafter(torch.zeros_like(total)))
    return torch.searchsorted(cum, target, right=True)[:, 0].clamp(max=y.shape[1] - 1)


def _draw_live(chunks: torch.Tensor, live: torch.Tensor, u: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """The draw of chunks' rows `rows` (int64 [r]) over their live chunks (live [r, m] bool, at
    most LIVE per row) laid end to end in vocabulary order, -inf after the last; u fp64 [r]."""
    at, cols = live.nonzero(as_tuple=True)  # row-major: a row's chunks in vocabulary order
    slot = live.cumsum(-1)[at, cols] - 1
    width = max(int(live.sum(-1).max()), 1)
    packed = chunks.new_full((rows.shape[0], width, CHUNK), float("-inf"))
    packed[at, slot] = chunks[rows[at], cols]
    chunk_ids = torch.zeros(rows.shape[0], width, dtype=torch.int64, device=chunks.device)
    chunk_ids[at, slot] = cols
    pos = _locate(packed.view(rows.shape[0], -1), u)
    return chunk_ids.gather(1, (pos // CHUNK)[:, None])[:, 0] * CHUNK + pos % CHUNK


def draw(chunks: torch.Tensor, maxima: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Each row's seeded inverse-CDF draw (int64 [n], a padded position of chunked()'s rows)
    from chunks [n, m, CHUNK], maxima [n, m] and uniforms u (fp64 [n])."""
    live = maxima > float("-inf")
    narrow = live.sum(-1) <= LIVE
    if not bool(narrow.any()):
        return _locate(chunks.flatten(1), u)
    rows = narrow.nonzero()[:, 0]
    token = _draw_live(chunks, live.index_select(0, rows), u.index_select(0, rows), rows)
    if rows.numel() == chunks.shape[0]:
        return token
    wide = (~narrow).nonzero()[:, 0]
    out = torch.empty(chunks.shape[0], dtype=torch.int64, device=chunks.device)
    out[rows] = token
    out[wide] = _locate(chunks.index_select(0, wide).flatten(1), u.index_select(0, wide))
    return out
