"""silu_and_mul, gelu_tanh_and_mul, gelu_and_mul: Triton kernel (interpreter) vs the torch reference."""
import pytest
import torch

from opchecks import kernel_path, run_both

GATED = ["silu_and_mul", "gelu_tanh_and_mul", "gelu_and_mul"]


@pytest.mark.parametrize("name", GATED)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("d", [8, 769, 1536, 4096, 5125])  # 4096: two full (unmasked) chunks
@pytest.mark.parametrize("tokens", [1, 83])
def test_gated_activation(name, dtype, d, tokens):
    x = torch.randn(tokens, 2 * d, dtype=dtype) * 3
    run_both(getattr(torch.ops.ascend, name), [torch.empty(tokens, d, dtype=dtype), x], mutated=[0])


@pytest.mark.parametrize("name", GATED)
def test_gated_activation_strided_rows_and_many_tokens(name):
    x = torch.randn(1000, 2 * 576 + 10)[:, : 2 * 576]
    run_both(getattr(torch.ops.ascend, name), [torch.empty(1000, 576), x], mutated=[0])


@pytest.mark.parametrize("name", GATED)
def test_gated_activation_saturates_for_large_gates(name):
    """The kernel's sigmoid and erf forms must give act(x) -> x for x >> 0 and -> 0 for x << 0, no NaN."""
    gate = torch.tensor([[-1e4, -80.0, -30.0, -5.0, 0.0, 5.0, 30.0, 80.0, 1e4]])
    x = torch.cat([gate, torch.full_like(gate, 2.0)], dim=-1)
    run_both(getattr(torch.ops.ascend, name), [torch.empty_like(gate), x], mutated=[0])
    out = torch.empty_like(gate)
    with kernel_path("triton"):
        getattr(torch.ops.ascend, name)(out, x)
    assert torch.isfinite(out).all()
    assert out[0, :2].abs().max() < 1e-30 and torch.equal(out[0, -2:], 2 * gate[0, -2:])
