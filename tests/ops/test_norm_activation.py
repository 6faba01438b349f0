"""rms_norm, fused_add_rms_norm, silu_and_mul, gelu_tanh_and_mul: reference vs an independent fp64
formula, opcheck, torch.compile, functional wrappers and bad inputs."""
import pytest
import torch
import torch.nn.functional as F

import ascendkit.ops as ak
from opchecks import compiles, opcheck, raises_naming
from tolerances import assert_close

OPS = torch.ops.ascend


def _rms64(x, w, eps):
    x64 = x.double()
    return (x64 / torch.sqrt(x64.pow(2).mean(-1, keepdim=True) + eps)) * w.double()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_reference_matches_fp64_formula(dtype):
    x, w, res = torch.randn(9, 769, dtype=dtype), torch.randn(769, dtype=dtype), torch.randn(9, 769, dtype=dtype)
    loose = {"rtol": 2e-2, "atol": 2e-2} if dtype != torch.float32 else {}
    assert_close(ak.rms_norm(x, w, 1e-5), _rms64(x, w, 1e-5).to(dtype), **loose)
    summed = (x.double() + res.double()).to(dtype)
    new_x, new_res = ak.fused_add_rms_norm(x.clone(), res.clone(), w, 1e-5)
    assert_close(new_res, summed)
    assert_close(new_x, _rms64(summed, w, 1e-5).to(dtype), **loose)
    y = torch.randn(9, 2 * 769, dtype=dtype) * 3
    gate, up = y[:, :769].double(), y[:, 769:].double()
    assert_close(ak.silu_and_mul(y), (gate / (1 + torch.exp(-gate)) * up).to(dtype))
    gelu_tanh = 0.5 * gate * (1 + torch.tanh((2 / torch.pi) ** 0.5 * (gate + 0.044715 * gate ** 3)))
    assert_close(ak.gelu_tanh_and_mul(y), (gelu_tanh * up).to(dtype))


def _args():
    x = torch.randn(7, 576)
    return {
        "rms_norm": (OPS.rms_norm.default, [torch.empty_like(x), x, torch.randn(576), 1e-5]),
        "fused_add_rms_norm": (OPS.fused_add_rms_norm.default, [x.clone(), torch.randn(7, 576), torch.randn(576), 1e-5]),
        "silu_and_mul": (OPS.silu_and_mul.default, [torch.empty(7, 288), x]),
        "gelu_tanh_and_mul": (OPS.gelu_tanh_and_mul.default, [torch.empty(7, 288), x]),
    }


@pytest.mark.parametrize("name", ["rms_norm", "fused_add_rms_norm", "silu_and_mul", "gelu_tanh_and_mul"])
@pytest.mark.parametrize("path", ["reference", "triton"])
def test_opcheck(name, path, monkeypatch):
    monkeypatch.setenv("ASCENDKIT_KERNELS", path)
    op, args = _args()[name]
    opcheck(op, args)


def test_compile_fullgraph():
    def block(x, residual, w_norm):
        ak.fused_add_rms_norm(x, residual, w_norm, 1e-5)
        h = ak.silu_and_mul(x) + ak.gelu_tanh_and_mul(x)
        return ak.rms_norm(h, w_norm[: h.shape[-1]].contiguous(), 1e-5) + residual[:, : h.shape[-1]]

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
    for gated in (OPS.silu_and_mul, OPS.gelu_tanh_and_mul):
        raises_naming(ValueError, "input", gated, torch.empty(4, 32), torch.randn(4, 65))
        raises_naming(ValueError, "out", gated, torch.empty(4, 31), x)
        raises_naming(ValueError, "input", gated, torch.empty(4, 32), torch.randn(64, 4).t())
        raises_naming(TypeError, "input", gated, torch.empty(4, 32), torch.ones(4, 64, dtype=torch.int64))
        raises_naming(TypeError, "out", gated, torch.empty(4, 32, dtype=torch.float16), x)


def test_bad_input_raises_before_any_kernel_runs(triton_path):
    out = torch.full((4, 64), 7.0)
    with pytest.raises(ValueError):
        OPS.rms_norm(out, torch.randn(4, 64), torch.randn(63), 1e-5)
    assert (out == 7.0).all()


def test_unknown_kernel_path(monkeypatch):
    monkeypatch.setenv("ASCENDKIT_KERNELS", "cuda-please")
    with pytest.raises(ValueError, match="ASCENDKIT_KERNELS"):
        ak.rms_norm(torch.randn(2, 8), torch.randn(8))
