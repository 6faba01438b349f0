"""static/dynamic int8 quant, the op contract: references vs independent numpy formulas (exact),
opcheck and torch.compile on both kernel paths, functional wrappers and bad inputs.
(Triton kernel vs reference numerics: tests/kernels/test_quant.py.)"""
import numpy as np
import pytest
import torch

import ascendtile.ops as ak
from opchecks import compiles, op_contract_tests, raises_naming

# The references against numpy: on a GPU too (tests/conftest.py), where the ops run the kernels by
# default (the kernels against the references: tests/kernels/).
pytestmark = pytest.mark.usefixtures("reference_path")
OPS = torch.ops.ascend
I8 = torch.int8


def _np_quant(x: torch.Tensor, scale: np.ndarray, azp=0) -> np.ndarray:
    # numpy's rint is round-half-even, like torch.round and CUDA's cvt.rni.
    return np.clip(np.rint(x.float().numpy(force=True) / scale) + azp, -128, 127).astype(np.int8)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_dynamic_symmetric_matches_numpy(dtype):
    x = torch.randn(9, 771, dtype=dtype) * 3
    x[4] = 0  # all-zero row: scale 0, values 0, no NaN/inf
    q, scales, azp = ak.dynamic_scaled_int8_quant(x)
    absmax = np.abs(x.float().numpy(force=True)).max(-1, keepdims=True)
    expect_scale = absmax / np.float32(127)
    assert azp is None and scales.shape == (9, 1)
    assert np.array_equal(scales.numpy(force=True), expect_scale)  # scales exact
    safe = np.where(expect_scale == 0, np.float32(1), expect_scale)
    assert np.array_equal(q.numpy(force=True), _np_quant(x, safe))
    assert (q[4] == 0).all() and scales[4].item() == 0.0
    assert q.abs().amax(-1).tolist() == [127 if i != 4 else 0 for i in range(9)]


def test_dynamic_symmetric_vs_vllm_multiply_differs_by_at_most_one():
    # vLLM's kernel rounds x * (127 / max|x|); we round x / (max|x| / 127). The two fp32 results
    # can straddle a .5 tie, so a few values differ by exactly 1; none by more.
    x = torch.randn(64, 4096)
    q, scales, _ = ak.dynamic_scaled_int8_quant(x)
    vllm = torch.round(x * (127 / x.abs().amax(-1, keepdim=True))).clamp(-128, 127)
    diff = (q.float() - vllm).abs()
    assert diff.max() <= 1 and diff.sum() < 1e-3 * x.numel()


def test_dynamic_asymmetric_matches_vllm_formula():
    x = torch.randn(6, 333) + torch.arange(6)[:, None]  # rows shifted: zero points differ
    x[2] = 0
    q, scales, azp = ak.dynamic_scaled_int8_quant(x, symmetric=False)
    xn = x.numpy(force=True)
    hi, lo = xn.max(-1, keepdims=True), xn.min(-1, keepdims=True)
    scale = (hi - lo) / np.float32(255)
    safe = np.where(scale == 0, np.float32(1), scale)
    zero = np.rint(np.float32(-128) - lo / safe)
    assert np.array_equal(scales.numpy(force=True), scale)
    assert np.array_equal(azp.numpy(force=True), zero.astype(np.int32))
    assert np.array_equal(q.numpy(force=True), _np_quant(x, safe, zero))
    assert q.min().item() == -128 and q.max().item() == 127
    dequant = (q.float() - azp.float()) * scales
    assert (dequant - x).abs().max() <= scales.max() * 0.5 + 1e-6
    assert (dequant[2] == 0).all() and azp[2].item() == -128


def test_static_rounds_half_to_even_and_saturates():
    x = torch.tensor([[0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 126.5, 127.5, 300.0, -128.5, -129.0, -1e9]])
    q = ak.static_scaled_int8_quant(x, torch.tensor([1.0]))
    assert q.tolist() == [[0, 2, 2, 0, -2, -2, 126, 127, 127, -128, -128, -128]]
    q = ak.static_scaled_int8_quant(x, torch.tensor([1.0]), torch.tensor([3], dtype=torch.int32))
    assert q.tolist() == [[3, 5, 5, 3, 1, 1, 127, 127, 127, -125, -126, -128]]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_static_matches_numpy(dtype):
    x = torch.randn(3, 5, 129, dtype=dtype)
    scale, azp = torch.tensor([0.013]), torch.tensor([-7], dtype=torch.int32)
    scale_np = scale.numpy(force=True)
    assert np.array_equal(ak.static_scaled_int8_quant(x, scale).numpy(force=True), _np_quant(x, scale_np))
    assert np.array_equal(ak.static_scaled_int8_quant(x, scale, azp).numpy(force=True), _np_quant(x, scale_np, -7))


def _args(scale: torch.Tensor, azp: torch.Tensor | None) -> list:
    return [torch.empty(7, 96, dtype=I8), torch.randn(7, 96), scale, azp]


test_opcheck, test_compile = op_contract_tests({
    "static_scaled_int8_quant": lambda: _args(torch.tensor([0.02]), torch.tensor([1], dtype=torch.int32)),
    "dynamic_scaled_int8_quant": lambda: _args(torch.empty(7, 1), None),
    "dynamic_scaled_int8_quant:azp": lambda: _args(torch.empty(7, 1), torch.empty(7, 1, dtype=torch.int32)),
})


def test_wrappers_compile():
    def quant(x):
        q, s, _ = ak.dynamic_scaled_int8_quant(x)
        q_asym, _, azp = ak.dynamic_scaled_int8_quant(x, symmetric=False)
        return q.float() * s + ak.static_scaled_int8_quant(x, s[0]).float() + (q_asym - azp).float()

    compiles(quant, torch.randn(5, 64))


def test_bad_inputs(values_checked):
    x, out, s = torch.randn(4, 64), torch.empty(4, 64, dtype=I8), torch.tensor([0.1])
    raises_naming(TypeError, "input", OPS.static_scaled_int8_quant, out, x.to(torch.int32), s, None)
    raises_naming(TypeError, "out", OPS.static_scaled_int8_quant, torch.empty(4, 64), x, s, None)
    raises_naming(ValueError, "out", OPS.static_scaled_int8_quant, torch.empty(4, 63, dtype=I8), x, s, None)
    raises_naming(ValueError, "input", OPS.static_scaled_int8_quant, out, torch.randn(64, 4).t(), s, None)
    raises_naming(ValueError, "scale", OPS.static_scaled_int8_quant, out, x, torch.ones(2), None)
    raises_naming(TypeError, "azp", OPS.static_scaled_int8_quant, out, x, s, torch.ones(1))
    raises_naming(ValueError, "scale", OPS.static_scaled_int8_quant, out, x, s.to("meta"), None)
    raises_naming(ValueError, "input", OPS.dynamic_scaled_int8_quant, torch.empty(4, 0, dtype=I8), torch.randn(4, 0), torch.empty(4, 1), None)
    raises_naming(ValueError, "scales", OPS.dynamic_scaled_int8_quant, out, x, torch.empty(3, 1), None)
    raises_naming(TypeError, "scales", OPS.dynamic_scaled_int8_quant, out, x, torch.empty(4, 1).half(), None)
    raises_naming(ValueError, "azp", OPS.dynamic_scaled_int8_quant, out, x, torch.empty(4, 1), torch.empty(5, dtype=torch.int32))


@pytest.mark.parametrize("path", ["reference", "triton"])
def test_bad_input_writes_nothing(path, monkeypatch):
    monkeypatch.setenv("ASCENDTILE_KERNELS", path)
    out, scales = torch.full((4, 64), 7, dtype=I8), torch.full((4, 1), 7.0)
    with pytest.raises(ValueError):
        OPS.dynamic_scaled_int8_quant(out, torch.randn(4, 64), scales, torch.zeros(3, dtype=torch.int32))
    assert (out == 7).all() and (scales == 7).all()
