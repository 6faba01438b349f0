"""rms_norm / fused_add_rms_norm: Triton kernel (interpreter) vs the torch reference."""
import pytest
import torch

from ascendtile.kernels.norm import block_for, max_rows_for, rows_for
from opchecks import run_both

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# Under the interpreter's 4-program grid 83 rows of a narrow width run as 4-16-row tiles with a
# partial last group; 3072 with a residual runs unmasked 1024-wide chunks, 5125 masked ones.
HIDDEN = [8, 576, 769, 3072, 4096, 5125, 8192]


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


# weight=None: 11 rows of 769 run as 2-row tiles with a partial last group; 3072 with a residual
# runs unmasked chunks, 5125 masked ones.
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", [769, 3072, 5125])
def test_no_weight(dtype, hidden):
    x = _rows(11, hidden, dtype, strided=True)
    out = torch.full((11, hidden), float("nan"), dtype=dtype)
    run_both(torch.ops.ascend.rms_norm, [out, x, None, 1e-5], mutated=[0])
    residual = torch.randn(11, hidden, dtype=dtype)
    run_both(torch.ops.ascend.fused_add_rms_norm, [x, residual, None, 1e-6], mutated=[0, 1])


@pytest.mark.parametrize("hidden,has_residual,n_rows,cores,expect", [
    (576, False, 2048, 40, 4),  # a 4 x 1024 tile: the 4096-element budget
    (576, True, 2048, 40, 2),
    (576, False, 32, 40, 1),  # a decode batch keeps one row per vector core
    (576, False, 100, 40, 2),  # 50 groups still cover 40 cores; 25 would not
    (2048, False, 4096, 40, 2),
    (4096, False, 4096, 40, 1),
    (7168, True, 4096, 40, 1),  # chunked rows go one at a time
])
def test_rows_per_tile(hidden, has_residual, n_rows, cores, expect):
    rows = rows_for(hidden, has_residual, n_rows, cores)
    assert rows == expect
    assert rows <= max_rows_for(hidden, has_residual)  # the gate lowers max_rows_for's tile


@pytest.mark.parametrize("hidden,has_residual,expect", [(7168, False, 1024), (3072, True, 1024), (8192, False, 2048),
                                                         (5125, False, 2048), (2048, True, 2048), (576, False, 1024)])
def test_chunks_divide_the_width(hidden, has_residual, expect):
    assert block_for(hidden, has_residual) == expect
