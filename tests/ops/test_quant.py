"""int8 quant, scaled_mm, w8a8_linear: references vs independent numpy/int64 formulas, exactness,
opcheck, torch.compile, functional wrappers and bad inputs."""
import numpy as np
import pytest
import torch

import ascendkit.ops as ak
from opchecks import compiles, opcheck, raises_naming
from tolerances import assert_close

OPS = torch.ops.ascend
I8 = torch.int8


def _np_quant(x: torch.Tensor, scale: np.ndarray, azp=0) -> np.ndarray:
    # numpy's rint is round-half-even, like torch.round and CUDA's cvt.rni.
    return np.clip(np.rint(x.float().numpy() / scale) + azp, -128, 127).astype(np.int8)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_dynamic_symmetric_matches_numpy(dtype):
    x = torch.randn(9, 771, dtype=dtype) * 3
    x[4] = 0  # all-zero row: scale 0, values 0, no NaN/inf
    q, scales, azp = ak.dynamic_scaled_int8_quant(x)
    absmax = np.abs(x.float().numpy()).max(-1, keepdims=True)
    expect_scale = absmax / np.float32(127)
    assert azp is None and scales.shape == (9, 1)
    assert np.array_equal(scales.numpy(), expect_scale)  # scales exact
    safe = np.where(expect_scale == 0, np.float32(1), expect_scale)
    assert np.array_equal(q.numpy(), _np_quant(x, safe))
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
    xn = x.numpy()
    hi, lo = xn.max(-1, keepdims=True), xn.min(-1, keepdims=True)
    scale = (hi - lo) / np.float32(255)
    safe = np.where(scale == 0, np.float32(1), scale)
    zero = np.rint(np.float32(-128) - lo / safe)
    assert np.array_equal(scales.numpy(), scale) and np.array_equal(azp.numpy(), zero.astype(np.int32))
    assert np.array_equal(q.numpy(), _np_quant(x, safe, zero))
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
    assert np.array_equal(ak.static_scaled_int8_quant(x, scale).numpy(), _np_quant(x, scale.numpy()))
    assert np.array_equal(ak.static_scaled_int8_quant(x, scale, azp).numpy(), _np_quant(x, scale.numpy(), -7))


GEMM_SHAPES = [(1, 256, 128), (33, 256, 496), (64, 971, 1024), (512, 2048, 1024)]


@pytest.mark.parametrize("m,k,n", GEMM_SHAPES)
def test_scaled_mm_int32_exact(m, k, n):
    a = torch.randint(-128, 128, (m, k), dtype=I8)
    w = torch.randint(-128, 128, (n, k), dtype=I8)  # nn.Linear layout: b = w.t() is column-major
    ones_m, ones_n = torch.ones(m, 1), torch.ones(n)
    got = ak.scaled_mm(a, w.t(), ones_m, ones_n, torch.float32)
    exact = a.long() @ w.long().t()
    assert torch.equal(got.double(), exact.double())  # |acc| < 2^24 here, so fp32 out is exact too


def test_scaled_mm_worst_case_accumulator_is_exact():
    # Every product is 2^14: K = 2048 sums to 2^25, past fp32's exact integers in one GEMM.
    a = torch.full((3, 2048), -128, dtype=I8)
    b = torch.full((2048, 5), -128, dtype=I8)
    b[7, 1] = 127  # an odd total: one ulp of fp32 at 2^25 is 4
    got = ak.scaled_mm(a, b, torch.tensor([2.0 ** -10]), torch.tensor([1.0]), torch.float32)
    exact = (a.long() @ b.long()).double() * 2.0 ** -10
    assert torch.equal(got.double(), exact)


@pytest.mark.parametrize("out_dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_scaled_mm_epilogue(out_dtype):
    m, k, n = 33, 256, 496
    a, b = torch.randint(-128, 128, (m, k), dtype=I8), torch.randint(-128, 128, (k, n), dtype=I8)
    a_s, b_s, bias = torch.rand(m, 1) * 1e-3, torch.rand(n) * 1e-3, torch.randn(n).to(out_dtype)
    expect = ((a.double() @ b.double()) * a_s.double() * b_s.double() + bias.double()).to(out_dtype)
    assert_close(ak.scaled_mm(a, b, a_s, b_s, out_dtype, bias), expect)
    scalar = ak.scaled_mm(a, b, torch.tensor([0.5]), torch.tensor([0.25]), out_dtype)
    assert_close(scalar, ((a.double() @ b.double()) * 0.125).to(out_dtype))
    zeros = ak.scaled_mm(torch.zeros(m, k, dtype=I8), b, a_s, b_s, out_dtype)
    assert (zeros == 0).all()


@pytest.mark.parametrize("static", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("lead,k,n", [((2, 7), 971, 130), ((512,), 2048, 1024)])
def test_w8a8_linear_is_quant_then_scaled_mm(static, dtype, lead, k, n):
    x = torch.randn(*lead, k, dtype=dtype)
    x.view(-1, k)[3] = 0
    w = torch.randint(-128, 128, (n, k), dtype=I8)
    w_scale, bias = torch.rand(n, 1) * 1e-2, torch.randn(n, dtype=dtype)
    x_scale = torch.tensor([0.04]) if static else None  # 127 * 0.04 covers randn without clipping
    got = ak.w8a8_linear(x, w, w_scale, x_scale, bias)
    if static:
        q, scales = ak.static_scaled_int8_quant(x, x_scale), x_scale
    else:
        q, scales, _ = ak.dynamic_scaled_int8_quant(x)
    expect = ak.scaled_mm(q.view(-1, k), w.t(), scales.reshape(-1, 1), w_scale.view(-1), dtype, bias)
    assert got.shape == (*lead, n) and got.dtype == dtype
    assert_close(got, expect.view(*lead, n))
    dense = x.float() @ (w.float() * w_scale).t() + bias.float()  # quantization error only
    assert ((got.float() - dense).norm() / dense.norm()).item() < 2e-2


def _args():
    x = torch.randn(7, 96)
    a, w = torch.randint(-128, 128, (7, 96), dtype=I8), torch.randint(-128, 128, (40, 96), dtype=I8)
    return {
        "static": (OPS.static_scaled_int8_quant.default, [torch.empty(7, 96, dtype=I8), x, torch.tensor([0.02]), torch.tensor([1], dtype=torch.int32)]),
        "dynamic": (OPS.dynamic_scaled_int8_quant.default, [torch.empty(7, 96, dtype=I8), x, torch.empty(7, 1), None]),
        "dynamic_azp": (OPS.dynamic_scaled_int8_quant.default, [torch.empty(7, 96, dtype=I8), x, torch.empty(7, 1), torch.empty(7, 1, dtype=torch.int32)]),
        "scaled_mm": (OPS.scaled_mm.default, [torch.empty(7, 40), a, w.t(), torch.rand(7, 1), torch.rand(40), torch.randn(40)]),
        "w8a8_linear": (OPS.w8a8_linear.default, [x, w, torch.rand(40), None, torch.randn(40)]),
        "w8a8_linear_static": (OPS.w8a8_linear.default, [x, w, torch.rand(40, 1), torch.tensor([0.03]), None]),
    }


@pytest.mark.parametrize("name", list(_args()))
@pytest.mark.parametrize("path", ["reference", "triton"])
def test_opcheck(name, path, monkeypatch):
    monkeypatch.setenv("ASCENDKIT_KERNELS", path)
    op, args = _args()[name]
    opcheck(op, args)


def test_compile_fullgraph():
    def quant_linear(x, w, w_scale, bias):
        y = ak.w8a8_linear(x, w, w_scale, None, bias)
        q, s, _ = ak.dynamic_scaled_int8_quant(y)
        return ak.scaled_mm(q, w[:, :48].t(), s, w_scale, torch.float32) + ak.static_scaled_int8_quant(y, s[0]).float()

    w = torch.randint(-128, 128, (48, 64), dtype=I8)
    compiles(quant_linear, torch.randn(5, 64), w, torch.rand(48) * 1e-2, torch.randn(48))


def test_bad_inputs():
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
    a, b = torch.randint(-128, 128, (4, 64), dtype=I8), torch.randint(-128, 128, (64, 8), dtype=I8)
    mm_out, a_s, b_s = torch.empty(4, 8), torch.ones(4, 1), torch.ones(8)
    raises_naming(TypeError, "a", OPS.scaled_mm, mm_out, a.int(), b, a_s, b_s, None)
    raises_naming(TypeError, "b", OPS.scaled_mm, mm_out, a, b.float(), a_s, b_s, None)
    raises_naming(ValueError, "b", OPS.scaled_mm, mm_out, a, b[:63], a_s, b_s, None)
    raises_naming(ValueError, "a", OPS.scaled_mm, mm_out, torch.randint(-128, 128, (64, 4), dtype=I8).t(), b, a_s, b_s, None)
    raises_naming(ValueError, "out", OPS.scaled_mm, torch.empty(4, 9), a, b, a_s, b_s, None)
    raises_naming(TypeError, "out", OPS.scaled_mm, torch.empty(4, 8, dtype=torch.int32), a, b, a_s, b_s, None)
    raises_naming(ValueError, "a_scales", OPS.scaled_mm, mm_out, a, b, torch.ones(3, 1), b_s, None)
    raises_naming(ValueError, "b_scales", OPS.scaled_mm, mm_out, a, b, a_s, torch.ones(7), None)
    raises_naming(TypeError, "bias", OPS.scaled_mm, mm_out, a, b, a_s, b_s, torch.ones(8).half())
    raises_naming(ValueError, "bias", OPS.scaled_mm, mm_out, a, b, a_s, b_s, torch.ones(9))
    raises_naming(ValueError, "b", OPS.scaled_mm, mm_out, a, b.to("meta"), a_s, b_s, None)
    w = torch.randint(-128, 128, (8, 64), dtype=I8)
    raises_naming(TypeError, "weight", OPS.w8a8_linear, x, w.float(), b_s, None, None)
    raises_naming(ValueError, "input", OPS.w8a8_linear, torch.randn(4, 65), w, b_s, None, None)
    raises_naming(ValueError, "weight_scale", OPS.w8a8_linear, x, w, torch.ones(64), None, None)
    raises_naming(TypeError, "weight_scale", OPS.w8a8_linear, x, w, torch.ones(8).half(), None, None)
    raises_naming(ValueError, "input_scale", OPS.w8a8_linear, x, w, b_s, torch.ones(4), None)
    raises_naming(TypeError, "bias", OPS.w8a8_linear, x.half(), w, b_s, None, torch.ones(8))
    raises_naming(ValueError, "weight", OPS.w8a8_linear, x, torch.randint(-128, 128, (64, 8), dtype=I8).t(), b_s, None, None)
    raises_naming(ValueError, "weight", OPS.w8a8_linear, x, w.to("meta"), b_s, None, None)
    raises_naming(TypeError, "input", OPS.w8a8_linear, x.long(), w, b_s, None, None)
    raises_naming(ValueError, "input", OPS.w8a8_linear, torch.randn(4, 0), torch.ones(8, 0, dtype=I8), b_s, None, None)


@pytest.mark.parametrize("path", ["reference", "triton"])
def test_bad_input_writes_nothing(path, monkeypatch):
    monkeypatch.setenv("ASCENDKIT_KERNELS", path)
    out, scales = torch.full((4, 64), 7, dtype=I8), torch.full((4, 1), 7.0)
    with pytest.raises(ValueError):
        OPS.dynamic_scaled_int8_quant(out, torch.randn(4, 64), scales, torch.zeros(3, dtype=torch.int32))
    assert (out == 7).all() and (scales == 7).all()
    mm_out = torch.full((4, 8), 7.0)
    with pytest.raises(ValueError):
        OPS.scaled_mm(mm_out, torch.ones(4, 64, dtype=I8), torch.ones(64, 8, dtype=I8), torch.ones(4, 1), torch.ones(8), torch.ones(9))
    assert (mm_out == 7).all()
