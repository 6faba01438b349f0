"""rms_norm, fused_add_rms_norm, the op contract: reference vs an independent fp64 formula, opcheck
and torch.compile on both kernel paths, functional wrappers and bad inputs.
(Triton kernel vs reference numerics: tests/kernels/test_norm.py.)"""
import pytest
import torch

import ascendtile.ops as ak
from opchecks import compiles, op_contract_tests, raises_naming
from tolerances import assert_close

OPS = torch.ops.ascend


def _rms64(x, w, eps):
    x64 = x.double()
    return (x64 / torch.sqrt(x64.pow(2).mean(-1, keepdim=True) + eps)) * w.double()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_reference_matches_fp64_formula(dtype):
    x, w, res = torch.randn(9, 769, dtype=dtype), torch.randn(769, dtype=dtype), torch.randn(9, 769, dtype=dtype)
    assert_close(ak.rms_norm(x, w, 1e-5), _rms64(x, w, 1e-5).to(dtype))
    summed = (x.double() + res.double()).to(dtype)
    new_x, new_res = ak.fused_add_rms_norm(x.clone(), res.clone(), w, 1e-5)
    assert_close(new_res, summed)
    assert_close(new_x, _rms64(summed, w, 1e-5).to(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_reference_is_bitwise_hf_llama_rms_norm(dtype):
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


test_opcheck, test_compile = op_contract_tests({
    "rms_norm": lambda: [torch.empty(7, 576), torch.randn(7, 576), torch.randn(576), 1e-5],
    "fused_add_rms_norm": lambda: [torch.randn(7, 576), torch.randn(7, 576), torch.randn(576), 1e-5],
})


def test_wrappers_compile():
    def block(x, residual, w_norm):
        ak.fused_add_rms_norm(x, residual, w_norm, 1e-5)
        return ak.rms_norm(x * 2, w_norm, 1e-5) + residual

    compiles(block, torch.randn(5, 64), torch.randn(5, 64), torch.randn(64))


def test_bad_inputs():
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


def test_bad_input_raises_before_any_kernel_runs(triton_path):
    out = torch.full((4, 64), 7.0)
    with pytest.raises(ValueError):
        OPS.rms_norm(out, torch.randn(4, 64), torch.randn(63), 1e-5)
    assert (out == 7.0).all()


def test_unknown_kernel_path(monkeypatch):
    monkeypatch.setenv("ASCENDTILE_KERNELS", "cuda-please")
    with pytest.raises(ValueError, match="ASCENDTILE_KERNELS"):
        ak.rms_norm(torch.randn(2, 8), torch.randn(8))
