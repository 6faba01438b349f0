"""Shared @triton.jit helpers for int8 quantization (used by quant.py and scaled_mm.py)."""
import triton
import triton.language as tl


@triton.jit
def round_half_even(x):
    """torch.round semantics (ties to even) from floor: Triton's `.to(int8)` truncates and
    libdevice's round is half-away-from-zero. Exact for every fp32: from 2^23 on x is integral
    (frac 0); +-inf keep their value (frac is NaN, so no branch adds 1); NaN stays NaN."""
    low = tl.floor(x)
    frac = x - low
    low_is_odd = (low - 2.0 * tl.floor(low * 0.5)) != 0.0
    return tl.where((frac > 0.5) | ((frac == 0.5) & low_is_odd), low + 1.0, low)


@triton.jit
def quantize_int8(x, divisor, zero_point):
    """saturate(round_half_even(x / divisor) + zero_point) as int8; x fp32, divisor never 0."""
    q = round_half_even(x / divisor) + zero_point
    return tl.minimum(tl.maximum(q, -128.0), 127.0).to(tl.int8)  # integral after the clamp: exact cast
