"""silu_and_mul: Triton kernel (interpreter) vs the torch reference."""
import pytest
import torch

from opchecks import run_both


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("d", [8, 769, 1536, 5125])
@pytest.mark.parametrize("tokens", [1, 83])
def test_silu_and_mul(dtype, d, tokens):
    x = torch.randn(tokens, 2 * d, dtype=dtype) * 3
    run_both(torch.ops.ascend.silu_and_mul, [torch.empty(tokens, d, dtype=dtype), x], mutated=[0])


def test_silu_and_mul_strided_rows_and_many_tokens():
    x = torch.randn(1000, 2 * 576 + 10)[:, : 2 * 576]
    run_both(torch.ops.ascend.silu_and_mul, [torch.empty(1000, 576), x], mutated=[0])
