"""Shared @triton.jit helpers for int8 quantization (used by quant.py and scaled_mm.py)."""
import triton
import triton.language as tl

# Beyond 2^22 every fp32 value is already an integer (and saturates anyway); clamping there first
# keeps floor/compare exact and the float finite.
_CLAMP: tl.constexpr = 4194304.0


@triton.jit
def round_half_even(x):
    """torch.round semantics (ties to even) from floor: Triton's `.to(int8)` truncates and
    libdevice's round is half-away-from-zero."""
    x = tl.minimum(tl.maximum(x, -_CLAMP), _CLAMP)
    low = tl.floor(x)
    frac = x - low
    low_is_odd = (low - 2.0 * tl.floor(low * 0.5)) != 0.0
    return tl.where((frac > 0.5) | ((frac == 0.5) & low_is_odd), low + 1.0, low)


@triton.jit
def quantize_int8(x, divisor, zero_point):
    """saturate(round_half_even(x / divisor) + zero_point) as int8; x fp32, divisor never 0."""
    q = round_half_even(x / divisor) + zero_point
    return tl.minimum(tl.maximum(q, -128.0), 127.0).to(tl.int8)  # integral after the clamp: exact cast
