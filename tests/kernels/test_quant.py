"""static/dynamic int8 quant: Triton kernel (interpreter) vs the torch reference. The int8 values,
scales and zero points must match exactly: both divide in fp32 and round half to even (on a GPU,
where Triton divides approximately: tests/tolerances.py, GPU_DIVISION)."""
import pytest
import torch

from ascendtile.kernels.quant import block_for
from opchecks import run_both

OPS = torch.ops.ascend
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _rows(tokens, hidden, dtype, strided):
    x = torch.randn(tokens, hidden + (13 if strided else 0), dtype=dtype) * 4
    x = x[:, :hidden]
    x[tokens // 2] = 0  # all-zero row
    return x



@pytest.mark.parametrize("dtype", DTYPES)
# one block; one padded block; unmasked 512-wide chunks; masked 1024-wide chunks
@pytest.mark.parametrize("hidden", [8, 769, 1536, 9000])
@pytest.mark.parametrize("asym", [False, True])
def test_dynamic(dtype, hidden, asym):
    x = _rows(7, hidden, dtype, strided=hidden == 769)
    azp = torch.empty(7, 1, dtype=torch.int32) if asym else None
    args = [torch.empty(7, hidden, dtype=torch.int8), x, torch.empty(7, 1), azp]
    run_both(OPS.dynamic_scaled_int8_quant, args, mutated=[0, 1, 2, 3] if asym else [0, 1, 2], exact=True)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", [8, 769, 1536, 9000])
@pytest.mark.parametrize("with_azp", [False, True])
def test_static(dtype, hidden, with_azp):
    x = _rows(7, hidden, dtype, strided=hidden == 8)
    azp = torch.tensor([5], dtype=torch.int32) if with_azp else None
    args = [torch.empty(7, hidden, dtype=torch.int8), x, torch.tensor([0.021]), azp]
    run_both(OPS.static_scaled_int8_quant, args, mutated=[0])


def test_ties_round_to_even_and_saturate():
    # Exact .5 ties after division by 0.5, values far past the int8 range, both signs.
    x = torch.tensor([[0.25, 0.75, 1.25, -0.25, -0.75, -1.25, 63.25, 63.75, 1e6, -64.25, -64.5, -1e30]])
    for azp in (None, torch.tensor([-3], dtype=torch.int32)):
        run_both(OPS.static_scaled_int8_quant, [torch.empty(1, 12, dtype=torch.int8), x, torch.tensor([0.5]), azp],
                 mutated=[0])


@pytest.mark.filterwarnings("ignore:invalid value encountered in subtract")  # inf - floor(inf) in the rounding
def test_huge_values_and_far_shifted_rows():
    # Past 2^22 fp32 spacing reaches .5 and 1: rounding must stay exact there, and +-inf saturate.
    x = torch.tensor([[1e9, 2.0**23 + 1, 2.0**22 + 0.5, 2.0**22 + 1.5, -(2.0**22) - 0.5, float("inf"), float("-inf"), 3e38]])
    azp = torch.tensor([-(2**22)], dtype=torch.int32)
    run_both(OPS.static_scaled_int8_quant, [torch.empty(1, 8, dtype=torch.int8), x, torch.tensor([1.0]), azp], mutated=[0])
    # A row far from 0 relative to its range: x / scale ~ 2.6e8 and a zero point to match.
    shifted = 1000 + torch.rand(4, 256) * 1e-3
    args = [torch.empty(4, 256, dtype=torch.int8), shifted, torch.empty(4, 1), torch.empty(4, 1, dtype=torch.int32)]
    run_both(OPS.dynamic_scaled_int8_quant, args, mutated=[0, 1, 2, 3], exact=True)


def test_dynamic_3d_and_many_tokens():
    x = torch.randn(3, 41, 576, dtype=torch.float16)
    run_both(OPS.dynamic_scaled_int8_quant, [torch.empty(3, 41, 576, dtype=torch.int8), x, torch.empty(3, 41, 1), None],
             mutated=[0, 1, 2], exact=True)


@pytest.mark.parametrize("hidden,expect", [(1024, 1024), (7168, 1024), (1536, 512), (18432, 1024), (11008, 1024), (9000, 1024)])
def test_chunks_divide_the_width(hidden, expect):
    # 11008 = 43 x 256 and 9000 have no chunk of 512 or more that divides them: masked 1024 chunks
    assert block_for(hidden) == expect
