"""How the tests in tests/vs_vllm/ hold our results to vLLM's: distances in ulps, or relative to a
magnitude where a result can cancel to ~0 (rope, gelu), each against a measured bound: the largest
distance and the largest share of elements that differ at all.

Bounds depend on our kernel path and, for bf16, on how each side rounds fp32 -> bf16: our reference
(torch) rounds to nearest, the Triton interpreter truncates (a property of the interpreter, not of
the kernels: compiled Triton rounds to nearest); vLLM's library, see
vllm_kernels.bf16_rounds_nearest. A bf16 bound is therefore looked up by a two-letter key, ours
then vLLM's: N = to nearest, T = truncation."""
from __future__ import annotations

import copy
from typing import Callable, NamedTuple, Sequence

import torch

from opchecks import kernel_path

PATHS = ["reference", "triton"]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def dtype_id(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")

EPS = {torch.float32: 2.0 ** -23, torch.float16: 2.0 ** -10, torch.bfloat16: 2.0 ** -7}
_OURS_BF16 = {"reference": "N", "triton": "T"}


class Bound(NamedTuple):
    """limit: the largest distance allowed (ulps, or units of eps·magnitude); share: the largest
    fraction of elements allowed to differ at all."""
    limit: float
    share: float


EXACT = Bound(0, 0.0)


def rounding_key(path: str, vllm_nearest: bool) -> str:
    return _OURS_BF16[path] + ("N" if vllm_nearest else "T")


def bound_for(table: dict, dtype: torch.dtype, path: str, vllm_nearest: bool) -> Bound:
    """table[dtype] is a Bound, or a dict by our path (fp32/fp16) or by rounding_key (bf16)."""
    entry = table[dtype]
    if isinstance(entry, Bound):
        return entry
    return entry[rounding_key(path, vllm_nearest) if dtype == torch.bfloat16 else path]


def on_path(path: str, op: Callable, args: Sequence) -> list:
    """Run op on deep copies of args on one of our kernel paths; returns the copies (written in place)."""
    args = copy.deepcopy(list(args))
    with kernel_path(path):
        op(*args)
    return args


def ulps(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Elementwise distance in units in the last place: the float bit patterns mapped to a line on
    which adjacent floats are adjacent integers (+0 and -0 both 0)."""
    assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, b.dtype, a.shape, b.shape)
    bits, sign = (torch.int32, 0x7FFFFFFF) if a.dtype == torch.float32 else (torch.int16, 0x7FFF)

    def line(t: torch.Tensor) -> torch.Tensor:
        i = t.contiguous().view(bits).long()
        return torch.where(i < 0, -(i & sign), i)

    return (line(a) - line(b)).abs()


def _check(distance: torch.Tensor, differ: torch.Tensor, bound: Bound, what: str, unit: str) -> None:
    worst = distance.max().item() if distance.numel() else 0
    share = differ.float().mean().item() if differ.numel() else 0.0
    assert worst <= bound.limit and share <= bound.share, (
        f"{what}: max {worst:.4g} {unit} (bound {bound.limit}), {share:.3f} of elements differ (bound {bound.share})")


def assert_ulps(ours: torch.Tensor, theirs: torch.Tensor, bound: Bound, what: str) -> None:
    u = ulps(ours, theirs)
    _check(u, u > 0, bound, what, "ulp")


def assert_relative(ours: torch.Tensor, theirs: torch.Tensor, magnitude: torch.Tensor, bound: Bound, what: str) -> None:
    """|ours - theirs| <= limit · eps(dtype) · magnitude elementwise (magnitude: what the result is
    made of, e.g. the norm of the rotated pair), and at most bound.share of elements differ."""
    diff = (ours.float() - theirs.float()).abs()
    scaled = diff / (EPS[ours.dtype] * magnitude.float())
    scaled = torch.where(diff == 0, torch.zeros_like(scaled), scaled)  # 0/0 where the magnitude is 0
    _check(scaled, diff > 0, bound, what, "eps·magnitude")
