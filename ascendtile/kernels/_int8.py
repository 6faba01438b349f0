"""Shared @triton.jit helpers for int8 quantization (used by quant.py, scaled_mm.py and the int8
KV cache writers in kv_cache.py)."""
import triton
import triton.language as tl

from ascendtile.kernels._reduce import fast_max


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


@triton.jit
def quantize_kv_static(x, scale):
    """The int8 KV cache's static quantization (ops/_kv_quant.py) of a row x fp32 [C] with the
    scalar scale: x / scale rounded half to even, NaN -> 0, saturated to ±127 (symmetric), int8."""
    q = round_half_even(x / scale)
    q = tl.where(q == q, q, 0.0)  # NaN (no int8 NaN); NaN compares would leave min/max undefined
    return tl.minimum(tl.maximum(q, -127.0), 127.0).to(tl.int8)


@triton.jit
def quantize_kv_dynamic(x):
    """The int8 KV cache's dynamic quantization of a row x fp32 [C] (padding lanes 0): (int8
    values [C], the fp32 scale max|row| / 127). A zero row: scale 0, values 0; a row holding NaN
    or ±inf: scale NaN, values 0 (its dequantized row is NaN). One 1-D row at a time: the
    compiler plans a row-wise reduction of a 2-D tile at several times the UB (lowering gate:
    [1, 512] overflows, [4, 256] plans 148 KB; a 1-D row of 512 plans ~50 KB)."""
    finite = tl.abs(x) < float("inf")  # False for NaN and ±inf
    amax = fast_max(tl.where(finite, tl.abs(x), 0.0), 0)
    bad = tl.sum(tl.where(finite, 0.0, 1.0), 0) > 0.0
    scale = tl.where(bad, float("nan"), amax / 127.0)
    divisor = tl.where(scale > 0.0, scale, 1.0)  # zero rows; NaN rows are zeroed below
    q = tl.minimum(tl.maximum(round_half_even(x / divisor), -127.0), 127.0)
    return tl.where(bad, 0.0, q).to(tl.int8), scale
