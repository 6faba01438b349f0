"""The draw of the sampling reference (sample_tokens' CPU path): greedy argmax and the seeded
inverse-CDF draw, both on a row's CHUNK-wide chunks (one vectorised max per chunk; torch's argmax
and topk are scalar loops, ~10x slower over a row).

A draw takes one uniform u per row, hashed from (seed, step), and locates u * total in the
row's e = exp(y - max y) (through exp2; 0 below 2^-125) laid out in vocabulary order: the chunk
sums' prefix sums (torch's CPU cumsum: one sequential pass, float64 accumulator) pick the chunk,
that chunk's own prefix sums the token. A chunk without a finite logit sums to exactly 0 and
leaves every prefix sum after it as it was, so the chunks holding a finite logit, packed end to
end, give bit for bit the whole row's prefix sums at those chunks. A row with at most LIVE such
chunks (process_logits leaves a narrow nucleus in a few chunks) draws from them alone, a wider
row from all of its chunks; both give the same token for the same seed. Everything is
row-local, so a seeded row draws the same token whatever the batch.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ascendtile.ops.reference._sampling_nonfinite import NEG_INF, POS_INF, settle

CHUNK = 64
LIVE = 128  # a row with at most this many chunks holding a finite logit draws from those alone
LOG2E = 1.4426950408889634
EXP2_FLOOR, FLUSH = -125.0, 2.0**-125  # exp2 of the floor is FLUSH itself, flushed (threshold keeps x > FLUSH)
NEAR = -124.0  # every exponent >= NEAR gives e > FLUSH: no clamp nor flush needed
_MASK32 = 0xFFFFFFFF
_MIX1, _MIX2, _STEP_SALT = 0x85EBCA6B, 0xC2B2AE35, 0x2545F491


def _fmix32(h: torch.Tensor) -> torch.Tensor:
    """murmur3's finaliser on int64 tensors holding 32-bit values (kernels/_rng.py on int32)."""
    h = h ^ (h >> 16)
    h = (h * _MIX1) & _MASK32
    h = h ^ (h >> 13)
    h = (h * _MIX2) & _MASK32
    return h ^ (h >> 16)


def row_keys(seeds: torch.Tensor, steps: torch.Tensor, salt: int = _STEP_SALT) -> torch.Tensor:
    """Per-row 32-bit keys (int64 [n]) from int64 seeds and steps [n], as kernels/_rng.salted_key
    (the default salt: sample_tokens' draw, kernels/_rng.row_key)."""
    lo, hi = seeds & _MASK32, (seeds >> 32) & _MASK32
    return _fmix32(lo ^ _fmix32(hi ^ _fmix32((steps & _MASK32) ^ salt)))


def uniforms(seeds: torch.Tensor, steps: torch.Tensor, salt: int = _STEP_SALT) -> torch.Tensor:
    """One uniform in (0, 1) per row (fp64 [n], exact) from the top 24 bits of its key."""
    return ((row_keys(seeds, steps, salt) >> 8).to(torch.float64) + 0.5) / (1 << 24)


def chunked(y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(chunks [n, m, CHUNK], their maxima [n, m]) of fp32 rows y [n, vocab]; a vocabulary that
    CHUNK does not divide is padded with -inf (a copy), a view otherwise."""
    pad = -y.shape[1] % CHUNK
    y = F.pad(y, (0, pad), value=NEG_INF) if pad else y.contiguous()
    chunks = y.view(y.shape[0], -1, CHUNK)
    return chunks, chunks.amax(-1)


def settled(chunks: torch.Tensor, maxima: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """chunked()'s (chunks, maxima) with the rows holding a NaN or +inf rewritten by settle (their
    +inf tokens as 0): a copy when there are such rows, the tensors themselves otherwise."""
    odd = (maxima.isnan() | (maxima == POS_INF)).any(-1)
    if not bool(odd.any()):
        return chunks, maxima
    rows = odd.nonzero()[:, 0]
    fixed = settle(chunks.index_select(0, rows), 0.0)
    return chunks.index_copy(0, rows, fixed), maxima.index_copy(0, rows, fixed.amax(-1))


def argmax(chunks: torch.Tensor, maxima: torch.Tensor) -> torch.Tensor:
    """Each row's argmax (int64 [n]) from settled(): the first chunk holding the row's max, then
    the first index in it, so ties go to the lowest id (and a row of -inf gets 0)."""
    chunk = maxima.argmax(-1)
    within = chunks[torch.arange(chunks.shape[0], device=chunks.device), chunk].argmax(-1)
    return chunk * CHUNK + within


def _exp(chunks: torch.Tensor, top: torch.Tensor) -> torch.Tensor:
    """e = exp(chunks - top) (chunks [r, m, CHUNK], top [r, 1, 1]) computed as exp2 of the
    difference times log2(e) (~1.7x faster than exp on CPU; equal up to rounding), 0 below FLUSH.
    exp2 of -inf (a filtered token) or of anything under -125 runs ~5-10x slower than of the
    rest, so such rows are clamped first and flushed after: a token under 2^-125 of the max has
    no chance a 24-bit uniform can express. When every logit lies within NEAR of its row's max,
    neither step is needed, and skipping them changes no value."""
    d = (chunks - top).mul_(LOG2E)
    if bool(d.amin() >= NEAR):
        return d.exp2_()
    return F.threshold_(d.clamp_(min=EXP2_FLOOR).exp2_(), FLUSH, 0.0)


def _before(cum: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """cum's inclusive prefix sums [r, w] read one place before index [r, 1] (0 at index 0):
    the exclusive prefix sum, as the sums' own values rather than cum - x."""
    return torch.where(index > 0, cum.gather(1, (index - 1).clamp(min=0)), 0.0)


def _locate(chunks: torch.Tensor, top: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Per row of chunks [r, m, CHUNK] (fp32, finite or -inf; top [r] its max), the first
    position (int64 [r], a row-major index) whose prefix sum of e exceeds u (fp64 [r]) times the
    total."""
    return locate(_exp(chunks, top[:, None, None]), u)


def locate(e: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Per row of weights e [r, m, CHUNK] (fp32 >= 0), the first position (int64 [r], a row-major
    index) whose prefix sum exceeds u (fp64 [r]) times the row's total. Each target stays below
    its total whatever the rounding, so the pick has e > 0 (a row of zeros: some position)."""
    rows = torch.arange(e.shape[0], device=e.device)
    sums = e.sum(-1)
    cum = sums.cumsum(-1)
    total = cum[:, -1:]
    target = torch.minimum((u[:, None] * total.double()).float(), total.nextafter(torch.zeros_like(total)))
    chunk = torch.searchsorted(cum, target, right=True).clamp(max=cum.shape[1] - 1)
    within = e[rows, chunk[:, 0]].cumsum(-1)
    offset = torch.minimum(target - _before(cum, chunk), within[:, -1:].nextafter(torch.zeros_like(total)))
    return chunk[:, 0] * CHUNK + torch.searchsorted(within, offset, right=True)[:, 0].clamp(max=CHUNK - 1)


def _draw_live(chunks: torch.Tensor, live: torch.Tensor, u: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """The draw of chunks' rows `rows` (int64 [r]) over their live chunks (live [r, m] bool, at
    most LIVE per row) laid end to end in vocabulary order, -inf after the last; u fp64 [r]."""
    at, cols = live.nonzero(as_tuple=True)  # row-major: a row's chunks in vocabulary order
    slot = live.cumsum(-1)[at, cols] - 1
    width = int(live.sum(-1).max())
    packed = chunks.new_full((rows.shape[0], width, CHUNK), NEG_INF)
    packed[at, slot] = chunks[rows[at], cols]
    chunk_ids = torch.zeros(rows.shape[0], width, dtype=torch.int64, device=chunks.device)
    chunk_ids[at, slot] = cols
    pos = _locate(packed, packed.flatten(1).amax(-1), u)
    return chunk_ids.gather(1, (pos // CHUNK)[:, None])[:, 0] * CHUNK + pos % CHUNK


def draw(chunks: torch.Tensor, maxima: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Each row's seeded inverse-CDF draw (int64 [n], a position of chunked()'s rows, never a
    padded one) from settled()'s chunks [n, m, CHUNK] and maxima [n, m] and uniforms u (fp64
    [n]); 0 in a row without a finite logit."""
    live = maxima > NEG_INF
    count = live.sum(-1)
    wide = count > LIVE
    if bool(wide.all()):
        return _locate(chunks, maxima.amax(-1), u)
    rows = ((count > 0) & ~wide).nonzero()[:, 0]
    if rows.numel() == chunks.shape[0]:
        return _draw_live(chunks, live, u, rows)
    out = torch.zeros(chunks.shape[0], dtype=torch.int64, device=chunks.device)
    if rows.numel():
        out[rows] = _draw_live(chunks, live.index_select(0, rows), u.index_select(0, rows), rows)
    wide = wide.nonzero()[:, 0]
    if wide.numel():
        out[wide] = _locate(chunks.index_select(0, wide), maxima.index_select(0, wide).amax(-1),
                            u.index_select(0, wide))
    return out
