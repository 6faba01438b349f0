"""static_scaled_int8_quant, dynamic_scaled_int8_quant vs vLLM's CPU kernels (torch.ops._C), same
inputs and call, on both of our paths: symmetric and with zero points (azp), strided rows, 3-D
input, zero tokens, an all-zero row (scale 0: ours quantizes it to 0, as do vLLM's AVX-512
builds; its AVX2 build gives -128, 0·(1/0) = NaN converted). vLLM's CPU quant takes 2-D input
only (3-D is refused): it gets the [tokens, hidden] view of the same tensor.

Scales and zero points are bit-identical. The int8 values differ only at rounding ties: vLLM's CPU
kernels multiply by 1/scale and add the zero point in fp32 before rounding, we divide and add it
after (vLLM's CUDA order: round(x / scale) + azp), so a value within a few fp32 ulps of k + 0.5 can
land one step apart, and at an exact tie with an odd azp round-half-even picks the other side
(vLLM CPU rounds x/scale + azp, we round x/scale). Measured on 2000 x 776 rows: every differing
value is 1 apart and within 2^-17 of a tie. Where x/scale and x·(1/scale) are both exact (a power-
of-two scale) and the zero point even, the two must agree bit for bit, ties included: that is what
catches a wrong rounding mode (half away from zero, truncation).

Not compared: the asymmetric dynamic quant of a constant row: vLLM divides by its zero scale
(its zero point comes out as INT32_MIN); ours stays finite."""
import copy

import pytest
import torch

from vllm_kernels import library_name
from vs_vllm._compare import DTYPES, PATHS, dtype_id, on_path

HIDDEN = 776
ZERO_ROW = 3
NEAR_TIE = 2.0 ** -15  # 4 fp32 ulps of a value in [64, 128): vLLM's 1/scale product and azp sum


def _distance_to_tie(t: torch.Tensor) -> torch.Tensor:
    return ((t - t.floor()) - 0.5).abs()


def _assert_equal_but_near_ties(ours: torch.Tensor, theirs: torch.Tensor, scaled: torch.Tensor) -> None:
    """ours == theirs except one step apart where scaled (x / scale in fp32) is near k + 0.5."""
    differ = ours != theirs
    assert ((ours.int() - theirs.int()).abs() <= 1).all()
    far = differ & (_distance_to_tie(scaled) > NEAR_TIE)
    assert not far.any(), f"{int(far.sum())} values differ away from a rounding tie, e.g. x/scale = {scaled[far][:4]}"


def _2d(t: torch.Tensor | None) -> torch.Tensor | None:
    """The [tokens, last dim] view vLLM's CPU quant takes (writes go through to t)."""
    return None if t is None else t.view(-1, t.shape[-1])


def _rows(layout: str, dtype: torch.dtype) -> torch.Tensor:
    if layout == "rows":
        return (torch.randn(16, HIDDEN) * 5).to(dtype)
    if layout == "strided":  # rows of a wider tensor: only the last dim is contiguous
        return (torch.randn(8, HIDDEN + 24) * 5).to(dtype)[:, :HIDDEN]
    if layout == "3d":
        return (torch.randn(2, 4, HIDDEN) * 5).to(dtype)
    return torch.randn(0, HIDDEN).to(dtype)


LAYOUTS = ["rows", "strided", "3d", "empty"]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("azp", [None, 6, 7], ids=["symmetric", "azp_even", "azp_odd"])
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_static_scaled_int8_quant(vllm_ops, dtype, path, azp, layout):
    x = _rows(layout, dtype)
    scale = torch.tensor([0.037])
    zero = None if azp is None else torch.tensor([azp], dtype=torch.int32)
    theirs = torch.empty(x.shape, dtype=torch.int8)
    vllm_ops.static_scaled_int8_quant(_2d(theirs), _2d(x), scale, zero)
    ours = on_path(path, torch.ops.ascend.static_scaled_int8_quant, [torch.empty_like(theirs), x, scale, zero])[0]
    _assert_equal_but_near_ties(ours, theirs, x.float() / scale)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("symmetric", [True, False], ids=["symmetric", "azp"])
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_dynamic_scaled_int8_quant(vllm_ops, dtype, path, symmetric, layout):
    x = _rows(layout, dtype)
    zero_row = symmetric and layout == "rows"
    if zero_row:
        x[ZERO_ROW] = 0
    rows = (*x.shape[:-1], 1)
    args = [torch.empty(x.shape, dtype=torch.int8), x, torch.empty(rows),
            None if symmetric else torch.empty(rows, dtype=torch.int32)]
    theirs = copy.deepcopy(args)
    vllm_ops.dynamic_scaled_int8_quant(*map(_2d, theirs))
    ours = on_path(path, torch.ops.ascend.dynamic_scaled_int8_quant, args)
    assert torch.equal(ours[2], theirs[2]), "scales"
    if not symmetric:
        assert torch.equal(ours[3], theirs[3]), "zero points"
    if zero_row:  # scale 0; ours quantizes the row to 0, vLLM's AVX2 build to -128 (0 · 1/0 = NaN, converted)
        assert not ours[0][ZERO_ROW].any()
        assert (theirs[0][ZERO_ROW] == (-128 if library_name() == "_C_AVX2.abi3.so" else 0)).all()
        ours[0][ZERO_ROW] = theirs[0][ZERO_ROW] = 0
    _assert_equal_but_near_ties(ours[0], theirs[0], x.float() / torch.where(ours[2] == 0, 1.0, ours[2]))


def _on_ties(dtype: torch.dtype, low: int) -> torch.Tensor:
    """Rows of multiples of 1/32 in [low/32, 254/32]: with a scale of 1/16 about half of x/scale
    are exact ties k + 0.5. Every row holds 254/32 = 127/16 and low/32, so the dynamic symmetric
    scale is max|x| / 127 = 1/16 (low = -254) and the asymmetric one (max - min) / 255 = 1/16 with
    zero point -128 - min·16 = 0 (low = -256)."""
    x = torch.randint(low, 255, (8, HIDDEN)).float() / 32
    x[:, 0], x[:, 1] = 254 / 32, low / 32
    return x.to(dtype)


def _assert_has_ties(t: torch.Tensor) -> None:
    assert (_distance_to_tie(t) == 0).float().mean() > 0.3, "the input should put many values on exact ties"


@pytest.mark.parametrize("azp", [None, 6], ids=["symmetric", "azp_even"])
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_static_ties_round_half_even_like_vllm(vllm_ops, dtype, path, azp):
    x, scale = _on_ties(dtype, -256), torch.tensor([1 / 16])
    _assert_has_ties(x.float() / scale)
    zero = None if azp is None else torch.tensor([azp], dtype=torch.int32)
    theirs = torch.empty(x.shape, dtype=torch.int8)
    vllm_ops.static_scaled_int8_quant(theirs, x, scale, zero)
    ours = on_path(path, torch.ops.ascend.static_scaled_int8_quant, [torch.empty_like(theirs), x, scale, zero])[0]
    assert torch.equal(ours, theirs)


@pytest.mark.parametrize("symmetric", [True, False], ids=["symmetric", "azp"])
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_dynamic_ties_round_half_even_like_vllm(vllm_ops, dtype, path, symmetric):
    x = _on_ties(dtype, -254 if symmetric else -256)
    _assert_has_ties(x.float() * 16)
    rows = (x.shape[0], 1)
    args = [torch.empty(x.shape, dtype=torch.int8), x, torch.empty(rows),
            None if symmetric else torch.empty(rows, dtype=torch.int32)]
    theirs = copy.deepcopy(args)
    vllm_ops.dynamic_scaled_int8_quant(*theirs)
    ours = on_path(path, torch.ops.ascend.dynamic_scaled_int8_quant, args)
    assert torch.equal(theirs[2], torch.full(rows, 1 / 16)), "the input should give vLLM a scale of 1/16"
    assert torch.equal(ours[2], theirs[2])
    if not symmetric:
        assert torch.equal(theirs[3], torch.zeros(rows, dtype=torch.int32))
        assert torch.equal(ours[3], theirs[3])
    assert torch.equal(ours[0], theirs[0])
