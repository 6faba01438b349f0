"""RMSNorm / SiLU·mul with int8 outputs, the op contract: references vs an independent numpy
formula, fused vs the unfused pair of existing ops on both kernel paths, opcheck and
torch.compile, wrappers and bad inputs. (Triton kernel vs reference: tests/kernels/.)

Fused vs unfused: the reference is the unfused pair, so they are equal on the CPU path. On the
Triton path silu_and_mul_quant does the same elementwise steps as silu_and_mul then
static_scaled_int8_quant: equal. The norm kernels sum squares over other tiles than rms_norm's
(one 512/1024-wide row against rms_norm's 2048-4096-wide ones), so rstd can differ in its last
fp32 bit and a model-dtype value by one ulp: within one int8 step, and rarely.
"""
import copy

import numpy as np
import pytest
import torch

import ascendtile.ops as ak
from opchecks import compiles, kernel_path, op_contract_tests, raises_naming

# The references against numpy: on a GPU too (tests/conftest.py), where the ops run the kernels by
# default (the kernels against the references: tests/kernels/).
pytestmark = pytest.mark.usefixtures("reference_path")
OPS = torch.ops.ascend
I8 = torch.int8
EPS = 1e-6


def _np_rms_norm(x: torch.Tensor, w: torch.Tensor) -> np.ndarray:
    """fp32 numpy RMSNorm with HF's two roundings to the model dtype (via torch casts only)."""
    xf = x.float().numpy(force=True)
    rstd = 1 / np.sqrt((xf * xf).mean(-1, keepdims=True) + np.float32(EPS))
    normed = torch.from_numpy((xf * rstd).astype(np.float32)).to(x.dtype).float().numpy(force=True)
    return torch.from_numpy(normed * w.float().numpy(force=True)).to(x.dtype).float().numpy(force=True)


def _steps(a: torch.Tensor, b) -> int:
    return int((a.int() - torch.as_tensor(b).int()).abs().max())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_dynamic_matches_numpy(dtype):
    x = torch.randn(9, 771, dtype=dtype) * 2
    x[3] = 0
    w = torch.rand(771, dtype=dtype) + 0.5
    q, scale = ak.rms_norm_dynamic_per_token_quant(x, w, EPS)
    y = _np_rms_norm(x, w)
    expect_scale = np.abs(y).max(-1, keepdims=True) / np.float32(127)
    np.testing.assert_allclose(scale.numpy(force=True), expect_scale, rtol=1e-6)  # numpy's mean sums in another order
    safe = np.where(expect_scale == 0, np.float32(1), expect_scale)
    assert _steps(q, np.clip(np.rint(y / safe), -128, 127).astype(np.int8)) <= 1
    assert scale[3].item() == 0 and (q[3] == 0).all()
    assert q.int().abs().amax(-1).tolist() == [127 if i != 3 else 0 for i in range(9)]


def test_residual_variants_match_numpy():
    x, r = torch.randn(5, 300), torch.randn(5, 300)
    w = torch.rand(300) + 0.5
    y = _np_rms_norm(x + r, w)
    r1 = r.clone()
    q, scale = ak.rms_norm_dynamic_per_token_quant(x, w, EPS, residual=r1)
    assert torch.equal(r1, x + r)
    assert _steps(q, np.rint(y / (np.abs(y).max(-1, keepdims=True) / 127))) <= 1
    r2 = r.clone()
    q2, _ = ak.fused_add_rms_norm_static_int8_quant(x, r2, w, torch.tensor([0.01]))
    assert torch.equal(r2, x + r)
    assert _steps(q2, np.clip(np.rint(y / np.float32(0.01)), -128, 127)) <= 1


def test_silu_and_mul_quant_matches_numpy():
    x = torch.randn(4, 2 * 333) * 3
    g, u = x[:, :333].numpy(force=True), x[:, 333:].numpy(force=True)
    y = g / (1 + np.exp(-g)) * u
    q = ak.silu_and_mul_quant(x, torch.tensor([0.02]))
    assert _steps(q, np.clip(np.rint(y / np.float32(0.02)), -128, 127)) <= 1


def _norm_inputs(dtype, hidden=1536, tokens=11):
    x = torch.randn(tokens, hidden, dtype=dtype) * 2
    return x, torch.randn(tokens, hidden, dtype=dtype), torch.rand(hidden, dtype=dtype) + 0.5


@pytest.mark.parametrize("path", ["reference", "triton"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("hidden", [576, 1536])
def test_fused_norm_quant_vs_unfused_pair(path, dtype, hidden):
    x, r, w = _norm_inputs(dtype, hidden)
    steps = 0 if path == "reference" else 1
    scale = torch.tensor([0.02])
    with kernel_path(path):
        q, s = ak.rms_norm_dynamic_per_token_quant(x, w, EPS)
        uq, us, _ = ak.dynamic_scaled_int8_quant(ak.rms_norm(x, w, EPS))
        assert _steps(q, uq) <= steps
        torch.testing.assert_close(s, us, rtol=0 if steps == 0 else 1e-2, atol=0)
        assert _steps(ak.rms_norm_static_int8_quant(x, w, scale, EPS), ak.static_scaled_int8_quant(ak.rms_norm(x, w, EPS), scale)) <= steps

        r_fused, r_pair, x_pair = r.clone(), r.clone(), x.clone()
        q, s = ak.rms_norm_dynamic_per_token_quant(x, w, EPS, residual=r_fused)
        ak.fused_add_rms_norm(x_pair, r_pair, w, EPS)
        uq, us, _ = ak.dynamic_scaled_int8_quant(x_pair)
        assert torch.equal(r_fused, r_pair) and _steps(q, uq) <= steps

        r_fused, r_pair, x_pair = r.clone(), r.clone(), x.clone()
        q, _ = ak.fused_add_rms_norm_static_int8_quant(x, r_fused, w, scale, EPS)
        ak.fused_add_rms_norm(x_pair, r_pair, w, EPS)
        assert torch.equal(r_fused, r_pair) and _steps(q, ak.static_scaled_int8_quant(x_pair, scale)) <= steps


@pytest.mark.parametrize("path", ["reference", "triton"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_silu_and_mul_quant_equals_unfused_pair(path, dtype):
    x = torch.randn(6, 2 * 1000, dtype=dtype) * 3
    scale = torch.tensor([0.015])
    with kernel_path(path):
        fused = ak.silu_and_mul_quant(x, scale)
        pair = ak.static_scaled_int8_quant(ak.silu_and_mul(x), scale)
    assert torch.equal(fused, pair)


test_opcheck, test_compile = op_contract_tests({
    "rms_norm_dynamic_per_token_quant": lambda: [torch.empty(7, 96, dtype=I8), torch.randn(7, 96), torch.rand(96),
                                                 torch.empty(7, 1), EPS, None, None],
    "rms_norm_dynamic_per_token_quant:residual": lambda: [torch.empty(7, 96, dtype=I8), torch.randn(7, 96),
                                                          torch.rand(96), torch.empty(7, 1), EPS, None, torch.randn(7, 96)],
    "rms_norm_static_int8_quant": lambda: [torch.empty(7, 96, dtype=I8), torch.randn(7, 96), torch.rand(96),
                                           torch.tensor([0.02]), EPS],
    "fused_add_rms_norm_static_int8_quant": lambda: [torch.empty(7, 96, dtype=I8), torch.randn(7, 96),
                                                     torch.randn(7, 96), torch.rand(96), torch.tensor([0.02]), EPS],
    "silu_and_mul_quant": lambda: [torch.empty(7, 48, dtype=I8), torch.randn(7, 96), torch.tensor([0.02])],
})


def test_wrappers_compile():
    def fused(x, r, w):
        q, s = ak.rms_norm_dynamic_per_token_quant(x, w, EPS, residual=r)
        q2 = ak.rms_norm_static_int8_quant(x, w, s[0], EPS)
        q3, r = ak.fused_add_rms_norm_static_int8_quant(x, r, w, s[0], EPS)
        return q.float() * s + q2.float() + q3.float() + r, ak.silu_and_mul_quant(torch.cat([x, r], -1), s[1]).float()

    compiles(fused, torch.randn(5, 64), torch.randn(5, 64), torch.rand(64))


def test_bad_inputs(values_checked):
    x, w, out, s = torch.randn(4, 64), torch.rand(64), torch.empty(4, 64, dtype=I8), torch.empty(4, 1)
    dyn = OPS.rms_norm_dynamic_per_token_quant
    raises_naming(TypeError, "input", dyn, out, x.to(torch.int32), w, s, EPS, None, None)
    raises_naming(TypeError, "result", dyn, torch.empty(4, 64), x, w, s, EPS, None, None)
    raises_naming(ValueError, "result", dyn, torch.empty(4, 63, dtype=I8), x, w, s, EPS, None, None)
    raises_naming(ValueError, "input", dyn, out, torch.randn(64, 4).t(), w, s, EPS, None, None)
    raises_naming(ValueError, "weight", dyn, out, x, torch.rand(63), s, EPS, None, None)
    raises_naming(TypeError, "weight", dyn, out, x, w.half(), s, EPS, None, None)
    raises_naming(ValueError, "scale", dyn, out, x, w, torch.empty(3, 1), EPS, None, None)
    raises_naming(ValueError, "scale", dyn, out, x, w, torch.empty(4, 2)[:, :1], EPS, None, None)
    raises_naming(ValueError, "scale_ub", dyn, out, x, w, s, EPS, torch.tensor([1.0]), None)
    raises_naming(ValueError, "residual", dyn, out, x, w, s, EPS, None, torch.randn(4, 32))
    raises_naming(TypeError, "residual", dyn, out, x, w, s, EPS, None, torch.randn(4, 64).half())
    raises_naming(ValueError, "epsilon", dyn, out, x, w, s, 0.0, None, None)
    raises_naming(ValueError, "scale", OPS.rms_norm_static_int8_quant, out, x, w, torch.ones(2), EPS)
    raises_naming(TypeError, "scale", OPS.fused_add_rms_norm_static_int8_quant, out, x, torch.randn(4, 64), w,
                  torch.ones(1, dtype=torch.float16), EPS)
    raises_naming(ValueError, "input", OPS.silu_and_mul_quant, torch.empty(4, 32, dtype=I8), torch.randn(4, 65), torch.ones(1))
    raises_naming(ValueError, "result", OPS.silu_and_mul_quant, torch.empty(4, 64, dtype=I8), x, torch.ones(1))
    raises_naming(ValueError, "scale", OPS.silu_and_mul_quant, torch.empty(4, 32, dtype=I8), x, torch.ones(1).to("meta"))


@pytest.mark.parametrize("path", ["reference", "triton"])
def test_bad_input_writes_nothing(path, monkeypatch):
    monkeypatch.setenv("ASCENDTILE_KERNELS", path)
    out, scale, residual = torch.full((4, 64), 7, dtype=I8), torch.full((4, 1), 7.0), torch.full((4, 64), 7.0)
    with pytest.raises(ValueError):
        OPS.rms_norm_dynamic_per_token_quant(out, torch.randn(4, 64), torch.rand(64), scale, EPS, torch.ones(1), residual)
    assert (out == 7).all() and (scale == 7).all() and (residual == 7).all()
