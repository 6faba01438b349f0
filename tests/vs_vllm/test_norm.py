"""rms_norm, fused_add_rms_norm vs vLLM's CPU kernels (torch.ops._C), same inputs and call, on both
of our paths, with and without weight.

vLLM's CPU norms need hidden % 8 == 0 (769 is refused, checked below), so the widths here are
8·odd. They read rows as contiguous whatever the row stride (a slice of a wider tensor comes out
as the rows of the raw memory), so for strided rows vLLM gets a contiguous copy and ours the slice.

Where the two differ: vLLM multiplies x·rstd·w in fp32 and rounds once; we round x·rstd to the
model dtype before the weight (HF's order, ours is bitwise HF); rstd differs in its last bits
(vLLM: an 8-lane sum and 1/sqrtf), which is all fp32 differs by. Bounds measured on 2000 x 776
rows of 3·randn (residual too; Triton path: 600 rows) against all three vLLM builds; see _compare
for the bf16 keys."""
import pytest
import torch

from vllm_kernels import bf16_rounds_nearest
from vs_vllm._compare import DTYPES, EXACT, PATHS, Bound, assert_ulps, bound_for, dtype_id, on_path

HIDDEN = 776  # 8 · 97
EPSILON = 1e-5

# (max ulps, max share of elements differing); measured maximum, fp32 +1 ulp, shares +0.06. fp32
# has no share bound: its differences come from rstd, one value per row, so rows differ as a whole.
RMS_NORM = {
    torch.float32: Bound(6, 1.0),  # measured 5 ulp / 0.26 (Triton 4 / 0.27)
    torch.float16: Bound(1, 0.32),  # 1 / 0.26
    torch.bfloat16: {"NN": Bound(1, 0.32), "NT": Bound(2, 0.56), "TN": Bound(3, 0.92), "TT": Bound(2, 0.54)},
}
# Without weight both sides round x·rstd once: they differ only where rstd's last bits do.
RMS_NORM_NO_WEIGHT = {
    torch.float32: Bound(5, 1.0),  # 4 / 0.28
    torch.float16: Bound(1, 0.02),  # 1 / < 0.001
    torch.bfloat16: {"NN": Bound(1, 0.02), "NT": Bound(1, 0.56), "TN": Bound(1, 0.56), "TT": Bound(1, 0.02)},
}
FUSED_INPUT = {
    torch.float32: Bound(6, 1.0),  # 5 / 0.26
    torch.float16: Bound(1, 0.32),  # 1 / 0.26
    torch.bfloat16: {"NN": Bound(1, 0.32), "NT": Bound(4, 0.71), "TN": Bound(4, 0.79), "TT": Bound(2, 0.35)},
}
FUSED_INPUT_NO_WEIGHT = {
    torch.float32: Bound(5, 1.0),  # 4 / 0.27
    torch.float16: Bound(1, 0.08),  # 1 / 0.02
    torch.bfloat16: {"NN": Bound(1, 0.08), "NT": Bound(3, 0.71), "TN": Bound(3, 0.43), "TT": Bound(1, 0.48)},
}
# input + residual, summed in fp32 and rounded once on both sides: exact when the roundings agree.
FUSED_RESIDUAL = {
    torch.float32: EXACT,
    torch.float16: EXACT,
    torch.bfloat16: {"NN": EXACT, "NT": Bound(1, 0.37), "TN": Bound(1, 0.37), "TT": EXACT},
}


def _rows(layout: str, dtype: torch.dtype) -> torch.Tensor:
    if layout == "rows":
        return torch.randn(8, HIDDEN, dtype=dtype) * 3
    if layout == "strided":  # rows of a wider tensor: only the last dim is contiguous
        return (torch.randn(8, HIDDEN + 24, dtype=dtype) * 3)[:, :HIDDEN]
    if layout == "3d":
        return torch.randn(2, 4, HIDDEN, dtype=dtype) * 3
    return torch.randn(0, HIDDEN, dtype=dtype)  # zero rows


LAYOUTS = ["rows", "strided", "3d", "empty"]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("weighted", [True, False], ids=["weight", "no_weight"])
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_rms_norm(vllm_ops, dtype, path, weighted, layout):
    x = _rows(layout, dtype)
    w = torch.randn(HIDDEN, dtype=dtype) if weighted else None
    theirs = torch.empty(x.shape, dtype=dtype)
    vllm_ops.rms_norm(theirs, x.contiguous(), w, EPSILON)
    ours = on_path(path, torch.ops.ascend.rms_norm, [torch.empty(x.shape, dtype=dtype), x, w, EPSILON])[0]
    bound = bound_for(RMS_NORM if weighted else RMS_NORM_NO_WEIGHT, dtype, path, bf16_rounds_nearest())
    assert_ulps(ours, theirs, bound, "rms_norm out")


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("weighted", [True, False], ids=["weight", "no_weight"])
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_fused_add_rms_norm(vllm_ops, dtype, path, weighted, layout):
    x = _rows(layout, dtype)
    residual = torch.randn(x.shape, dtype=dtype) * 3
    w = torch.randn(HIDDEN, dtype=dtype) if weighted else None
    their_x, their_residual = x.clone(memory_format=torch.contiguous_format), residual.clone()
    vllm_ops.fused_add_rms_norm(their_x, their_residual, w, EPSILON)
    our_x, our_residual = on_path(path, torch.ops.ascend.fused_add_rms_norm, [x, residual, w, EPSILON])[:2]
    nearest = bf16_rounds_nearest()
    assert_ulps(our_residual, their_residual, bound_for(FUSED_RESIDUAL, dtype, path, nearest), "residual")
    assert_ulps(our_x, their_x, bound_for(FUSED_INPUT if weighted else FUSED_INPUT_NO_WEIGHT, dtype, path, nearest),
                "input (normalised)")


def _toward_zero(v: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """fp32 v rounded toward zero to dtype (a wrong rounding, for the test below)."""
    y = v.to(dtype)
    over = y.float().abs() > v.abs()
    return torch.where(over, torch.nextafter(y, torch.zeros_like(y)), y)


def test_a_truncating_rms_norm_is_caught(vllm_ops):
    """The fp16 bound is tight enough to reject HF's formula with both roundings toward zero."""
    x, w = torch.randn(48, HIDDEN, dtype=torch.float16) * 3, torch.randn(HIDDEN, dtype=torch.float16)
    theirs = torch.empty_like(x)
    vllm_ops.rms_norm(theirs, x, w, EPSILON)
    xf = x.float()
    normed = _toward_zero(xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPSILON), torch.float16)
    wrong = _toward_zero(normed.float() * w.float(), torch.float16)
    with pytest.raises(AssertionError, match="of elements differ"):
        assert_ulps(wrong, theirs, RMS_NORM[torch.float16], "truncated")


def test_vllm_refuses_widths_not_a_multiple_of_8_which_we_take(vllm_ops):
    x, w = torch.randn(3, 769), torch.randn(769)
    with pytest.raises(RuntimeError, match="VEC_ELEM_NUM"):
        vllm_ops.rms_norm(torch.empty_like(x), x, w, EPSILON)
    out = torch.empty_like(x)
    torch.ops.ascend.rms_norm(out, x, w, EPSILON)
    assert torch.isfinite(out).all()
