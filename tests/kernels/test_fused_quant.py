"""rms_norm / silu_and_mul with int8 outputs: Triton kernel (interpreter) vs the torch reference.

int8 values may differ by one step where the model-dtype value before quantization differs by
one ulp: the kernel's fp32 sum of squares is summed in another order than torch's mean. The 3.2
interpreter also casts fp32 -> bf16 by truncation where torch rounds to nearest; each such cast
(the normalised value, the weighted value, with a residual also the stored sum) moves a value by
less than 2^-7 of itself, under one step at |q| <= 127: bf16 gets two steps, three with a
residual. The dynamic scales follow the model dtype's tolerance, as the norm itself.
"""
import copy

import pytest
import torch

from ascendtile.kernels.activation import block_for as gated_block_for
from ascendtile.kernels.fused_quant import block_for
from opchecks import kernel_path
from tolerances import assert_close

OPS = torch.ops.ascend
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# one padded block; 576 padded to 1024; unmasked 512-wide chunks; masked chunks (1024 static, 512 dynamic)
HIDDEN = [8, 576, 1536, 2000]


def assert_int8_close(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype, truncations: int = 2) -> None:
    """fp32 / fp16: at most one step apart, and at most 1% of the values differ at all. bf16: one
    step per truncating cast (`truncations`); a truncation moves a value by 0.25-1 step near
    |q| ~ 64-127, so many values may differ (a third in a small sample)."""
    steps, share_limit = (truncations, 0.5) if dtype == torch.bfloat16 else (1, 0.01)
    diff = (actual.int() - expected.int()).abs()
    assert diff.max().item() <= steps, f"int8 values differ by {diff.max().item()} > {steps} steps"
    share = (diff > 0).float().mean().item()
    assert share <= share_limit, f"{share:.1%} of the int8 values differ"


def both_paths(op, args: list) -> tuple[list, list]:
    ref, tri = copy.deepcopy(args), copy.deepcopy(args)
    with kernel_path("reference"):
        op(*ref)
    with kernel_path("triton"):
        op(*tri)
    return ref, tri


def _rows(tokens: int, hidden: int, dtype: torch.dtype, strided: bool) -> torch.Tensor:
    x = torch.randn(tokens, hidden + (13 if strided else 0), dtype=dtype)[:, :hidden] * 3
    return x


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", HIDDEN)
@pytest.mark.parametrize("with_residual", [False, True])
def test_rms_norm_dynamic_per_token_quant(dtype, hidden, with_residual):
    x = _rows(9, hidden, dtype, strided=hidden in (8, 1536))
    x[4] = 0  # a zero row (no residual): scale 0, values 0
    residual = torch.randn(9, hidden, dtype=dtype) if with_residual else None
    w = torch.rand(hidden, dtype=dtype) + 0.5
    args = [torch.empty(9, hidden, dtype=torch.int8), x, w, torch.empty(9, 1), 1e-6, None, residual]
    ref, tri = both_paths(OPS.rms_norm_dynamic_per_token_quant, args)
    assert_int8_close(tri[0], ref[0], dtype, 3 if with_residual else 2)
    assert_close(tri[3], ref[3], **_scale_tol(dtype))
    if with_residual:
        assert_close(tri[6], ref[6], **_scale_tol(dtype))
    else:
        assert tri[3][4].item() == 0 and (tri[0][4] == 0).all()


def _scale_tol(dtype: torch.dtype) -> dict:
    # a scale is max|y| / 127 of a model-dtype y: as close as that dtype's values (fp32 tolerance
    # for fp32 inputs); bf16 one truncated ulp (2^-7 relative)
    return {torch.float32: {"rtol": 1.3e-6, "atol": 1e-7}, torch.float16: {"rtol": 2e-3, "atol": 1e-5},
            torch.bfloat16: {"rtol": 1.6e-2, "atol": 1e-4}}[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", HIDDEN)
@pytest.mark.parametrize("with_residual", [False, True])
def test_rms_norm_static_int8_quant(dtype, hidden, with_residual):
    x = _rows(7, hidden, dtype, strided=hidden in (576, 2000))
    w = torch.rand(hidden, dtype=dtype) + 0.5
    scale = torch.tensor([0.015])  # |y| up to ~3-4 / 0.015: some values saturate
    out = torch.empty(7, hidden, dtype=torch.int8)
    if with_residual:
        args = [out, x, torch.randn(7, hidden, dtype=dtype), w, scale, 1e-5]
        ref, tri = both_paths(OPS.fused_add_rms_norm_static_int8_quant, args)
        assert_close(tri[2], ref[2], **_scale_tol(dtype))
        assert torch.equal(tri[1], x) and torch.equal(ref[1], x)  # input is not written
    else:
        ref, tri = both_paths(OPS.rms_norm_static_int8_quant, [out, x, w, scale, 1e-5])
    assert_int8_close(tri[0], ref[0], dtype, 3 if with_residual else 2)
    assert (ref[0].int().abs() >= 127).any()  # some values saturate


def test_rms_norm_quant_3d_and_many_tokens():
    x = torch.randn(3, 41, 576, dtype=torch.float16)
    w = torch.rand(576, dtype=torch.float16) + 0.5
    args = [torch.empty(3, 41, 576, dtype=torch.int8), x, w, torch.empty(3, 41, 1), 1e-6, None, None]
    ref, tri = both_paths(OPS.rms_norm_dynamic_per_token_quant, args)
    assert_int8_close(tri[0], ref[0], torch.float16)
    assert_close(tri[3], ref[3], **_scale_tol(torch.float16))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("d", [8, 1000, 2048])  # one padded block; a masked 1024 chunk; two full chunks
def test_silu_and_mul_quant(dtype, d):
    x = _rows(5, 2 * d, dtype, strided=d == 1000)
    args = [torch.empty(5, d, dtype=torch.int8), x, torch.tensor([0.015])]
    ref, tri = both_paths(OPS.silu_and_mul_quant, args)
    # elementwise: the sigmoid's last bit and bf16's one truncating cast, under one step together
    assert_int8_close(tri[0], ref[0], dtype, truncations=1)
    assert (ref[0] == 127).any()


def test_chunks():
    widths = (8, 576, 1024, 1536, 2048, 4096, 7168, 2000)
    assert [block_for(h, dynamic=False) for h in widths] == [8, 1024, 1024, 512, 1024, 1024, 1024, 1024]
    assert [block_for(h, dynamic=True) for h in widths] == [8, 1024, 1024, 512, 512, 512, 512, 512]
    assert [gated_block_for(d, quant=True) for d in (1536, 8192, 11008, 18432)] == [1024] * 4
    assert gated_block_for(8192) == 2048  # the float output keeps its wider chunk
