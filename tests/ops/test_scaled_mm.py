"""scaled_mm, w8a8_linear, the op contract: references vs independent int64/float64 formulas
(int32-exact accumulation), opcheck and torch.compile on both kernel paths, functional wrappers and
bad inputs. (Triton kernel vs reference numerics: tests/kernels/test_scaled_mm.py.)"""
import pytest
import torch

import ascendtile.ops as ak
from ascendtile.ops.reference import scaled_mm as scaled_mm_reference
from opchecks import compiles, op_contract_tests, raises_naming
from tolerances import assert_close

OPS = torch.ops.ascend
I8 = torch.int8


def _int8(*shape):
    return torch.randint(-128, 128, shape, dtype=I8)


GEMM_SHAPES = [(1, 256, 128), (33, 256, 496), (64, 971, 1024), (512, 2048, 1024)]


@pytest.mark.parametrize("m,k,n", GEMM_SHAPES)
def test_scaled_mm_int32_exact(m, k, n, int8_gemm):
    a, w = _int8(m, k), _int8(n, k)  # nn.Linear layout: b = w.t() is column-major
    ones_m, ones_n = torch.ones(m, 1), torch.ones(n)
    got = ak.scaled_mm(a, w.t(), ones_m, ones_n, torch.float32)
    exact = a.long() @ w.long().t()
    assert torch.equal(got.double(), exact.double())  # |acc| < 2^24 here, so fp32 out is exact too


@pytest.fixture(params=["int_mm", "fp32_slices"])
def int8_gemm(request, monkeypatch):
    """Both CPU GEMMs of the reference: torch._int_mm (CPUs with int8 dot products) and exact fp32
    K slices (the others), whichever this CPU has; yields the torch._int_mm calls made."""
    if torch.get_default_device().type != "cpu":
        pytest.skip("the CPU reference's GEMMs (on a GPU the op runs the kernel: tests/kernels/test_scaled_mm.py)")
    calls = []
    int_mm = torch._int_mm
    monkeypatch.setattr(torch, "_int_mm", lambda a, b: calls.append(1) or int_mm(a, b))
    monkeypatch.setattr(scaled_mm_reference, "cpu_has_int8_dot", lambda: request.param == "int_mm")
    yield calls
    assert bool(calls) == (request.param == "int_mm")


def test_reference_gemm_follows_the_cpu():
    assert scaled_mm_reference.cpu_has_int8_dot() == (torch.cpu._is_vnni_supported() or torch.cpu._is_amx_tile_supported())


def test_scaled_mm_worst_case_accumulator_is_exact(int8_gemm):
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
    a, b = _int8(m, k), _int8(k, n)
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
    w = _int8(n, k)
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


test_opcheck, test_compile = op_contract_tests({
    "scaled_mm": lambda: [torch.empty(7, 40), _int8(7, 96), _int8(40, 96).t(), torch.rand(7, 1), torch.rand(40), torch.randn(40)],
    "w8a8_linear": lambda: [torch.randn(7, 96), _int8(40, 96), torch.rand(40), None, torch.randn(40)],
    "w8a8_linear:static": lambda: [torch.randn(7, 96), _int8(40, 96), torch.rand(40, 1), torch.tensor([0.03]), None],
})


def test_wrappers_compile():
    def quant_linear(x, w, w_scale, bias, input_scale):
        y = ak.w8a8_linear(x, w, w_scale, None, bias)
        a = ak.w8a8_linear(x, w, w_scale, input_scale, None)
        return ak.scaled_mm(w[:, :48], w[:, :48].t(), w_scale[:, None], w_scale, torch.float32) + y + a

    compiles(quant_linear, torch.randn(48, 64), _int8(48, 64), torch.rand(48) * 1e-2, torch.randn(48),
             torch.tensor([0.05]))


def test_bad_inputs(values_checked):
    x = torch.randn(4, 64)
    a, b = _int8(4, 64), _int8(64, 8)
    mm_out, a_s, b_s = torch.empty(4, 8), torch.ones(4, 1), torch.ones(8)
    raises_naming(TypeError, "a", OPS.scaled_mm, mm_out, a.int(), b, a_s, b_s, None)
    raises_naming(TypeError, "b", OPS.scaled_mm, mm_out, a, b.float(), a_s, b_s, None)
    raises_naming(ValueError, "b", OPS.scaled_mm, mm_out, a, b[:63], a_s, b_s, None)
    raises_naming(ValueError, "a", OPS.scaled_mm, mm_out, _int8(64, 4).t(), b, a_s, b_s, None)
    raises_naming(ValueError, "out", OPS.scaled_mm, torch.empty(4, 9), a, b, a_s, b_s, None)
    raises_naming(TypeError, "out", OPS.scaled_mm, torch.empty(4, 8, dtype=torch.int32), a, b, a_s, b_s, None)
    raises_naming(ValueError, "a_scales", OPS.scaled_mm, mm_out, a, b, torch.ones(3, 1), b_s, None)
    raises_naming(ValueError, "b_scales", OPS.scaled_mm, mm_out, a, b, a_s, torch.ones(7), None)
    raises_naming(TypeError, "bias", OPS.scaled_mm, mm_out, a, b, a_s, b_s, torch.ones(8).half())
    raises_naming(ValueError, "bias", OPS.scaled_mm, mm_out, a, b, a_s, b_s, torch.ones(9))
    raises_naming(ValueError, "b", OPS.scaled_mm, mm_out, a, b.to("meta"), a_s, b_s, None)
    w = _int8(8, 64)
    raises_naming(TypeError, "weight", OPS.w8a8_linear, x, w.float(), b_s, None, None)
    raises_naming(ValueError, "input", OPS.w8a8_linear, torch.randn(4, 65), w, b_s, None, None)
    raises_naming(ValueError, "weight_scale", OPS.w8a8_linear, x, w, torch.ones(64), None, None)
    raises_naming(TypeError, "weight_scale", OPS.w8a8_linear, x, w, torch.ones(8).half(), None, None)
    raises_naming(ValueError, "input_scale", OPS.w8a8_linear, x, w, b_s, torch.ones(4), None)
    raises_naming(TypeError, "bias", OPS.w8a8_linear, x.half(), w, b_s, None, torch.ones(8))
    raises_naming(ValueError, "weight", OPS.w8a8_linear, x, _int8(64, 8).t(), b_s, None, None)
    raises_naming(ValueError, "weight", OPS.w8a8_linear, x, w.to("meta"), b_s, None, None)
    raises_naming(TypeError, "input", OPS.w8a8_linear, x.long(), w, b_s, None, None)
    raises_naming(ValueError, "input", OPS.w8a8_linear, torch.randn(4, 0), torch.ones(8, 0, dtype=I8), b_s, None, None)


@pytest.mark.parametrize("path", ["reference", "triton"])
def test_bad_input_writes_nothing(path, monkeypatch):
    monkeypatch.setenv("ASCENDTILE_KERNELS", path)
    mm_out = torch.full((4, 8), 7.0)
    with pytest.raises(ValueError):
        OPS.scaled_mm(mm_out, torch.ones(4, 64, dtype=I8), torch.ones(64, 8, dtype=I8), torch.ones(4, 1), torch.ones(8), torch.ones(9))
    assert (mm_out == 7).all()
