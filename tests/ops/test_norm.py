"""rms_norm, fused_add_rms_norm, the op contract: reference vs an independent fp64 formula, opcheck
and torch.compile on both kernel paths, functional wrappers and bad inputs.
(Triton kernel vs reference numerics: tests/kernels/test_norm.py.)"""
import pytest
import torch

import ascendtile.ops as ak
from opchecks import compiles, kernel_path, op_contract_tests, raises_naming
from tolerances import assert_close

OPS = torch.ops.ascend


def _rms64(x, w, eps):
    x64 = x.double()
    normed = x64 / torch.sqrt(x64.pow(2).mean(-1, keepdim=True) + eps)
    return normed if w is None else normed * w.double()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_reference_matches_fp64_formula(dtype):
    x, w, res = torch.randn(9, 769, dtype=dtype), torch.randn(769, dtype=dtype), torch.randn(9, 769, dtype=dtype)
    assert_close(ak.rms_norm(x, w, 1e-5), _rms64(x, w, 1e-5).to(dtype))
    summed = (x.double() + res.double()).to(dtype)
    new_x, new_res = ak.fused_add_rms_norm(x.clone(), res.clone(), w, 1e-5)
    assert_close(new_res, summed)
    assert_close(new_x, _rms64(summed, w, 1e-5).to(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_reference_is_bitwise_hf_llama_rms_norm(dtype, reference_path):
    """The tokens-identical-to-HF guarantee rests on the same fp32 ops in the same order as HF's
    LlamaRMSNorm (written out here as transformers does), strided rows included."""
    x = torch.randn(9, 2 * 576, dtype=dtype)[:, :576]
    w, res = torch.randn(576, dtype=dtype), torch.randn(9, 576, dtype=dtype)

    def hf(h):
        hf32 = h.float()
        hf32 = hf32 * torch.rsqrt(hf32.pow(2).mean(-1, keepdim=True) + 1e-5)
        return w * hf32.to(dtype)

    assert torch.equal(ak.rms_norm(x, w, 1e-5), hf(x))
    summed = (x.float() + res.float()).to(dtype)
    new_x, new_res = ak.fused_add_rms_norm(x.contiguous(), res.clone(), w, 1e-5)
    assert torch.equal(new_res, summed) and torch.equal(new_x, hf(summed))


@pytest.mark.parametrize("path", ["reference", "triton"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("hidden", [769, 4099])  # one pass with padded columns; chunked rows with a masked tail
def test_no_weight_matches_fp64_formula(path, dtype, hidden):
    """weight=None (vLLM 0.32): x * rsqrt(mean(x^2) + eps) computed in fp32 and rounded once, so
    within one ulp of the fp64 value (tighter than the 3-ulp table, which allows for the weighted
    form's second rounding; one ulp, not half: the 3.2 interpreter truncates fp32 -> bf16);
    strided rows, on both kernel paths."""
    x = torch.randn(9, hidden + 5, dtype=dtype)[:, :hidden]
    res = torch.randn(9, hidden, dtype=dtype)
    tol = {"rtol": max(torch.finfo(dtype).eps, 1e-6), "atol": torch.finfo(dtype).smallest_normal}
    with kernel_path(path):
        out = torch.full((9, hidden), float("nan"), dtype=dtype)
        OPS.rms_norm(out, x, None, 1e-5)
        new_x, new_res = ak.fused_add_rms_norm(x.contiguous(), res.clone(), None, 1e-5)
    torch.testing.assert_close(out.double(), _rms64(x, None, 1e-5), **tol)
    torch.testing.assert_close(new_res.double(), x.double() + res.double(), **tol)
    torch.testing.assert_close(new_x.double(), _rms64(new_res, None, 1e-5), **tol)  # the norm of the stored sum


def test_no_weight_wrapper_is_the_unweighted_hf_norm():
    """bf16, no weight: HF's fp32 normalisation rounded once (no weight multiply after it)."""
    x = torch.randn(5, 576, dtype=torch.bfloat16)
    xf = x.float()
    expected = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(torch.bfloat16)
    assert torch.equal(ak.rms_norm(x, None), expected)
    assert torch.equal(ak.rms_norm(x, None, validate=False), expected)


test_opcheck, test_compile = op_contract_tests({
    "rms_norm": lambda: [torch.empty(7, 576), torch.randn(7, 576), torch.randn(576), 1e-5],
    "rms_norm:no_weight": lambda: [torch.empty(7, 576), torch.randn(7, 576), None, 1e-5],
    "fused_add_rms_norm": lambda: [torch.randn(7, 576), torch.randn(7, 576), torch.randn(576), 1e-5],
    "fused_add_rms_norm:no_weight": lambda: [torch.randn(7, 576), torch.randn(7, 576), None, 1e-5],
})


def test_wrappers_compile():
    def block(x, residual, w_norm):
        ak.fused_add_rms_norm(x, residual, w_norm, 1e-5)
        ak.fused_add_rms_norm(x, residual, None, 1e-5)
        return ak.rms_norm(x * 2, w_norm, 1e-5) + ak.rms_norm(x, None, 1e-5) + residual

    compiles(block, torch.randn(5, 64), torch.randn(5, 64), torch.randn(64))


def test_bad_inputs(values_checked):
    x, w = torch.randn(4, 64), torch.randn(64)
    out = torch.empty_like(x)
    raises_naming(TypeError, "input", OPS.rms_norm, out, x.to(torch.int32), w, 1e-5)
    raises_naming(TypeError, "input", OPS.rms_norm, out, x.double(), w, 1e-5)
    raises_naming(ValueError, "weight", OPS.rms_norm, out, x, torch.randn(63), 1e-5)
    raises_naming(ValueError, "out", OPS.rms_norm, torch.empty(4, 32), x, w, 1e-5)
    raises_naming(ValueError, "input", OPS.rms_norm, out, torch.randn(64, 4).t(), w, 1e-5)
    raises_naming(TypeError, "out", OPS.rms_norm, out.half(), x, w, 1e-5)
    raises_naming(ValueError, "epsilon", OPS.rms_norm, out, x, w, 0.0)
    raises_naming(ValueError, "input", OPS.rms_norm, torch.empty(64), torch.randn(64), w, 1e-5)
    raises_naming(ValueError, "weight", OPS.rms_norm, out, x, w.to("meta"), 1e-5)
    raises_naming(ValueError, "residual", OPS.fused_add_rms_norm, x, torch.randn(4, 65), w, 1e-5)
    raises_naming(TypeError, "residual", OPS.fused_add_rms_norm, x, torch.randn(4, 64).half(), w, 1e-5)
    # weight is optional, but a given weight is still checked (shape: ValueError, dtype: TypeError)
    raises_naming(ValueError, "weight", OPS.fused_add_rms_norm, x, torch.randn(4, 64), torch.randn(63), 1e-5)
    raises_naming(ValueError, "weight", OPS.fused_add_rms_norm, x, torch.randn(4, 64), torch.randn(1, 64), 1e-5)
    raises_naming(TypeError, "weight", OPS.rms_norm, out, x, w.half(), 1e-5)
    raises_naming(TypeError, "weight", OPS.fused_add_rms_norm, x, torch.randn(4, 64), w.half(), 1e-5)
    # and without one the other arguments still are
    raises_naming(ValueError, "out", OPS.rms_norm, torch.empty(4, 32), x, None, 1e-5)
    raises_naming(ValueError, "residual", OPS.fused_add_rms_norm, x, torch.randn(4, 65), None, 1e-5)
    raises_naming(ValueError, "epsilon", OPS.rms_norm, out, x, None, 0.0)


def test_bad_input_raises_before_any_kernel_runs(triton_path):
    out = torch.full((4, 64), 7.0)
    with pytest.raises(ValueError):
        OPS.rms_norm(out, torch.randn(4, 64), torch.randn(63), 1e-5)
    assert (out == 7.0).all()


def test_unknown_kernel_path(monkeypatch):
    monkeypatch.setenv("ASCENDTILE_KERNELS", "cuda-please")
    with pytest.raises(ValueError, match="ASCENDTILE_KERNELS"):
        ak.rms_norm(torch.randn(2, 8), torch.randn(8))
