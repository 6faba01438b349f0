"""silu_and_mul, gelu_tanh_and_mul, gelu_and_mul, the op contract: reference vs an independent fp64 formula,
opcheck and torch.compile on both kernel paths, functional wrappers and bad inputs.
(Triton kernel vs reference numerics: tests/kernels/test_activation.py.)"""
import pytest
import torch

import ascendtile.ops as ak
from opchecks import compiles, op_contract_tests, raises_naming
from tolerances import assert_close

OPS = torch.ops.ascend


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_reference_matches_fp64_formula(dtype):
    y = torch.randn(9, 2 * 769, dtype=dtype) * 3
    gate, up = y[:, :769].double(), y[:, 769:].double()
    assert_close(ak.silu_and_mul(y), (gate / (1 + torch.exp(-gate)) * up).to(dtype))
    gelu_tanh = 0.5 * gate * (1 + torch.tanh((2 / torch.pi) ** 0.5 * (gate + 0.044715 * gate ** 3)))
    assert_close(ak.gelu_tanh_and_mul(y), (gelu_tanh * up).to(dtype))
    # exact GELU as x·Φ(x), the standard normal CDF (not the erf the reference calls)
    assert_close(ak.gelu_and_mul(y), (gate * torch.special.ndtr(gate) * up).to(dtype))


test_opcheck, test_compile = op_contract_tests({
    "silu_and_mul": lambda: [torch.empty(7, 288), torch.randn(7, 576)],
    "gelu_tanh_and_mul": lambda: [torch.empty(7, 288), torch.randn(7, 576)],
    "gelu_and_mul": lambda: [torch.empty(7, 288), torch.randn(7, 576)],
})


def test_wrappers_compile():
    def mlp(x):
        return ak.silu_and_mul(x) + ak.gelu_tanh_and_mul(x) + ak.gelu_and_mul(x)

    compiles(mlp, torch.randn(5, 64))


@pytest.mark.parametrize("name", ["silu_and_mul", "gelu_tanh_and_mul", "gelu_and_mul"])
def test_bad_inputs(name, values_checked):
    gated, x = getattr(OPS, name), torch.randn(4, 64)
    raises_naming(ValueError, "input", gated, torch.empty(4, 32), torch.randn(4, 65))
    raises_naming(ValueError, "out", gated, torch.empty(4, 31), x)
    raises_naming(ValueError, "input", gated, torch.empty(4, 32), torch.randn(64, 4).t())
    raises_naming(TypeError, "input", gated, torch.empty(4, 32), torch.ones(4, 64, dtype=torch.int64))
    raises_naming(TypeError, "out", gated, torch.empty(4, 32, dtype=torch.float16), x)
    raises_naming(ValueError, "out", gated, torch.empty(4, 32, device="meta"), x)


def test_bad_input_writes_nothing(triton_path):
    out = torch.full((4, 32), 7.0)
    with pytest.raises(ValueError):
        OPS.silu_and_mul(out, torch.randn(4, 63))
    assert (out == 7.0).all()
