"""The one tolerance table for kernel-vs-reference comparisons, per output dtype.

fp32: both sides compute in fp32; only summation order differs (FlagGems' 1.3e-6 rtol).
fp16/bf16: the kernel and the reference compute in fp32 and differ only by summation order, but an
op may round twice (RMSNorm rounds the normalised value to the model dtype, then again after the
weight, as HF does), so a 1-ulp difference before the second rounding can grow to ~2.5 ulp:
3 ulp is allowed (fp16 ulp 2^-10, bf16 ulp 2^-7 relative at the bottom of a binade).
"""
from __future__ import annotations

import torch

TOLERANCES = {
    torch.float32: {"rtol": 1.3e-6, "atol": 1e-5},
    torch.float16: {"rtol": 3e-3, "atol": 1e-3},
    torch.bfloat16: {"rtol": 2.4e-2, "atol": 1e-2},
    # Integer outputs (int8 quantized values, int32 zero points) are exact on both paths.
    torch.int8: {"rtol": 0, "atol": 0},
    torch.int32: {"rtol": 0, "atol": 0},
}

# w4a16_linear's kernel vs its reference, for outputs of unit scale (tests/ops/_w4a16.py's data):
# the kernel rounds each exact fp32 weight once to the activation dtype for the dot (see
# kernels/w4a16.py), the reference multiplies by the fp32 weight. fp16: measured up to 2 ulp of
# outputs in [2, 4) (0.002); bf16 under the interpreter, which truncates that rounding and the
# output's: up to 0.031 (1 ulp in [4, 8)). fp32 needs nothing beyond the table.
W4A16_TOLERANCES = {
    torch.float32: TOLERANCES[torch.float32],
    torch.float16: {"rtol": 3e-3, "atol": 4e-3},
    torch.bfloat16: {"rtol": 2.4e-2, "atol": 4e-2},
}


# Outputs the kernel and the reference compute bit-exactly on CPU (assert_close(..., exact=True)).
# On an NVIDIA GPU (tests/conftest.py) Triton divides fp32 approximately (div.full.f32, up to 2 ulp)
# where the interpreter and torch divide as IEEE does: a quantized value at a rounding boundary may
# land one int8 step away, a divided fp32 value (temperature, scale) an ulp or two away.
EXACT = {"rtol": 0, "atol": 0}
GPU_DIVISION = {torch.float32: {"rtol": 2.4e-7, "atol": 0}, torch.int8: {"rtol": 0, "atol": 1},
                torch.int32: {"rtol": 0, "atol": 1}}


def exact_tolerance(dtype: torch.dtype) -> dict:
    """rtol/atol of an output the two paths compute bit-exactly on CPU (see above)."""
    return GPU_DIVISION.get(dtype, EXACT) if torch.get_default_device().type != "cpu" else EXACT


def assert_close(actual: torch.Tensor, expected: torch.Tensor, exact: bool = False, **override) -> None:
    tol = exact_tolerance(expected.dtype) if exact else {**TOLERANCES[expected.dtype], **override}
