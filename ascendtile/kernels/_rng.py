"""Counter-based random numbers for sampling: a 32-bit integer hash of (seed, step, vocab
position), so a row's noise depends only on its own request and never on the batch around it.

The hash is murmur3's 32-bit finaliser (two xor-shift-multiply rounds), written on int32 with
wrapping multiplies; right shifts are masked so the arithmetic shift of a negative int32 acts as
a logical one. ascendtile/ops/reference/_sampling_draw.py derives its one uniform per row from the same
row key (computed in int64, masked to 32 bits) but draws by inverse CDF, not Gumbel-max.
"""
import triton
import triton.language as tl

# Multipliers as signed int32 (0x85EBCA6B, 0xC2B2AE35, 0x9E3779B1).
MIX1 = tl.constexpr(-2048144789)
MIX2 = tl.constexpr(-1028477387)
GOLDEN = tl.constexpr(-1640531535)
STEP_SALT = tl.constexpr(0x2545F491)


@triton.jit
def fmix32(h):
    h = h ^ ((h >> 16) & 0xFFFF)
    h = h * MIX1
    h = h ^ ((h >> 13) & 0x7FFFF)
    h = h * MIX2
    return h ^ ((h >> 16) & 0xFFFF)


@triton.jit
def salted_key(seed, step, salt):
    """Scalar int32 key from an int64 seed and int64 step; a distinct salt per use keeps the draws of
    one (seed, step) independent of each other (sampling's draw, rejection's acceptance and
    recovered draw)."""
    seed_lo = seed.to(tl.int32)
    seed_hi = (seed >> 32).to(tl.int32)
    return fmix32(seed_lo ^ fmix32(seed_hi ^ fmix32(step.to(tl.int32) ^ salt)))


@triton.jit
def row_key(seed, step):
    """Scalar int32 key of one sampled row (sample_tokens)."""
    return salted_key(seed, step, STEP_SALT)


@triton.jit
def unit_uniform(h):
    """u = (the top 23 bits of the int32 hash h + 0.5) / 2^23 in (0, 1): exact in fp32, never 0 or 1."""
    return (((h >> 9) & 0x7FFFFF).to(tl.float32) + 0.5) * (1.0 / 8388608.0)


@triton.jit
def gumbel(key, cols):
    """Gumbel noise -log(-log(u)) at int32 vocab positions `cols`; u (unit_uniform) is never 0 or 1,
    so the noise is always finite (no 0/0 on an exact-0 draw)."""
    u = unit_uniform(fmix32((cols * GOLDEN) ^ key))
    return -tl.log(-tl.log(u))
