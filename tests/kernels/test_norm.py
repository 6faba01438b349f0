"""rms_norm / fused_add_rms_norm: Triton kernel (interpreter) vs the torch reference."""
import pytest
import torch

from opchecks import run_both

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
HIDDEN = [8, 576, 769, 4096, 5125, 8192]


def _rows(tokens: int, hidden: int, dtype: torch.dtype, strided: bool) -> torch.Tensor:
    if strided:  # rows padded to a larger pitch: only the last dim is contiguous
        return torch.randn(tokens, hidden + 13, dtype=dtype)[:, :hidden]
    return torch.randn(tokens, hidden, dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", HIDDEN)
@pytest.mark.parametrize("strided", [False, True])
def test_rms_norm(dtype, hidden, strided):
    x = _rows(83, hidden, dtype, strided)
    w = torch.randn(hidden, dtype=dtype)
    run_both(torch.ops.ascend.rms_norm, [torch.empty(83, hidden, dtype=dtype), x, w, 1e-5], mutated=[0])


@pytest.mark.parametrize("tokens,hidden", [(1, 576), (7, 769), (1031, 576), (1000, 5125)])
def test_rms_norm_token_counts(tokens, hidden):
    x = torch.randn(tokens, hidden, dtype=torch.float16)
    w = torch.randn(hidden, dtype=torch.float16)
    run_both(torch.ops.ascend.rms_norm, [torch.empty_like(x), x, w, 1e-6], mutated=[0])


def test_rms_norm_3d_input():
    x = torch.randn(3, 7, 576)
    run_both(torch.ops.ascend.rms_norm, [torch.empty_like(x), x, torch.randn(576), 1e-5], mutated=[0])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", HIDDEN)
def test_fused_add_rms_norm(dtype, hidden):
    x = _rows(83, hidden, dtype, strided=hidden % 2 == 1)
    residual = torch.randn(83, hidden, dtype=dtype)
    w = torch.randn(hidden, dtype=dtype)
    run_both(torch.ops.ascend.fused_add_rms_norm, [x, residual, w, 1e-6], mutated=[0, 1])


@pytest.mark.parametrize("tokens", [1, 7, 1000])
def test_fused_add_rms_norm_token_counts(tokens):
    x = torch.randn(tokens, 576, dtype=torch.bfloat16)
    residual = torch.randn(tokens, 576, dtype=torch.bfloat16)
    run_both(torch.ops.ascend.fused_add_rms_norm, [x, residual, torch.randn(576, dtype=torch.bfloat16), 1e-5], mutated=[0, 1])
