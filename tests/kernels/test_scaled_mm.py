"""scaled_mm and w8a8_linear: Triton kernel (interpreter) vs the torch reference.

The kernel and the reference compute the same int32 accumulator and the same fp32 epilogue, so
with unit scales the results are the exact integer products, and otherwise they agree within the
output dtype's tolerance (in practice bit for bit)."""
import pytest
import torch

from ascendtile.kernels.scaled_mm import tile_shapes, tiles_for
from opchecks import kernel_path, run_both

OPS = torch.ops.ascend
I8 = torch.int8


def _int8(*shape):
    return torch.randint(-128, 128, shape, dtype=I8)


# The shapes; the largest takes ~6-10 s per test in the interpreter.
GEMM_SHAPES = [(1, 256, 128, torch.float16), (33, 256, 496, torch.bfloat16), (64, 971, 1024, torch.float32),
               pytest.param(512, 2048, 1024, torch.float16, marks=pytest.mark.slow)]


@pytest.mark.parametrize("m,k,n,out_dtype", GEMM_SHAPES)
def test_scaled_mm_linear_layout(m, k, n, out_dtype):
    a, w = _int8(m, k), _int8(n, k)  # b = w.t(): K-contiguous, the nn.Linear weight layout
    args = [torch.empty(m, n, dtype=out_dtype), a, w.t(), torch.rand(m, 1) * 1e-3, torch.rand(n) * 1e-3, torch.randn(n).to(out_dtype)]
    run_both(OPS.scaled_mm, args, mutated=[0])


@pytest.mark.parametrize("m,k,n", [(1, 256, 128), (33, 256, 496), (64, 971, 1024)])
def test_scaled_mm_int32_accumulator_exact(m, k, n, triton_path):
    a, w = _int8(m, k), _int8(n, k)
    out = torch.empty(m, n)
    OPS.scaled_mm(out, a, w.t(), torch.ones(1), torch.ones(1), None)
    exact = a.cpu().long() @ w.cpu().long().t()  # CUDA has no int64 GEMM
    assert torch.equal(out.double().cpu(), exact.double())  # |acc| < 2^24: exact in fp32


@pytest.mark.parametrize("layout", ["row_major", "strided"])
def test_scaled_mm_b_any_strides(layout):
    a = _int8(40, 100 + 3)[:, :100]  # strided rows of a
    b = _int8(100, 70) if layout == "row_major" else _int8(200, 140)[::2, ::2]
    args = [torch.empty(40, 70, dtype=torch.float16), a, b, torch.rand(40, 1) * 1e-2, torch.rand(70) * 1e-2, None]
    run_both(OPS.scaled_mm, args, mutated=[0])


def test_scaled_mm_scalar_scales_zero_and_extreme_inputs():
    a, b = _int8(17, 300), _int8(300, 129)
    a[3] = 0
    a[5] = -128
    b[:, 7] = -128
    args = [torch.empty(17, 129), a, b, torch.tensor([0.5]), torch.tensor([2.0 ** -7]), torch.randn(129)]
    run_both(OPS.scaled_mm, args, mutated=[0])


@pytest.mark.parametrize("m", [4096, 2])
def test_scaled_mm_m_range(m):
    a, w = _int8(m, 48), _int8(40, 48)
    run_both(OPS.scaled_mm, [torch.empty(m, 40, dtype=torch.bfloat16), a, w.t(), torch.rand(m, 1), torch.rand(40), None], mutated=[0])


# The launcher quantizes the activations (quant kernel), then runs the int8 GEMM, at every M.
@pytest.mark.parametrize("m,k,n,dtype", [*GEMM_SHAPES, (200, 300, 130, torch.float16)])
@pytest.mark.parametrize("static", [False, True])
def test_w8a8_linear(m, k, n, dtype, static):
    x = torch.randn(m, k, dtype=dtype)
    x[m // 2] = 0
    args = [x, _int8(n, k), torch.rand(n) * 1e-2, torch.tensor([0.03]) if static else None, torch.randn(n, dtype=dtype)]
    run_both(OPS.w8a8_linear, args, mutated=[])


def test_w8a8_linear_3d_strided_input_and_column_scale():
    x = torch.randn(2, 9, 200, dtype=torch.float16)[..., :190]  # rows with a pitch of 200
    args = [x, _int8(33, 190), torch.rand(33, 1) * 1e-2, None, None]
    run_both(OPS.w8a8_linear, args, mutated=[])
    with kernel_path("triton"):
        assert OPS.w8a8_linear(*args).shape == (2, 9, 33)


@pytest.mark.parametrize("m,n,cores,k_contiguous,expect", [
    (1, 4096, 24, True, (16, 256)),  # 16 tiles in one wave, not 32 tiles in two (the second 8 busy)
    (1, 1024, 20, True, (16, 64)),  # 16 busy cores rather than 4
    (1, 6144, 20, True, (16, 256)),  # 2 waves of 256 columns against 3 of 128: a tie, the larger wins
    (2048, 4096, 20, True, (128, 256)),
    (2048, 4096, 20, False, (128, 128)),  # a row-major b's 128x256 tile overflows the UB budget
    (33, 496, 4, True, (64, 128)),
])
def test_tiles_fill_the_cube_cores(m, n, cores, k_contiguous, expect):
    block_m, block_n, block_k = tiles_for(m, n, cores, k_contiguous)
    assert (block_m, block_n) == expect
    assert (block_m, block_n, block_k) in tile_shapes(k_contiguous)  # the gate lowers exactly these


def _fp32_sequential(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b with an fp32 running sum over k, one rounding per addition (what an fp32
    accumulator would do in k order)."""
    acc = torch.zeros(a.shape[0], b.shape[1])
    for k in range(a.shape[1]):
        acc += a[:, k:k + 1].float() * b[k].float()
    return acc


def test_scaled_mm_int32_accumulator_exact_past_2_pow_24(triton_path):
    """|acc| ~ 2048 * 113^2 ~ 2.6e7 > 2^24, where fp32 holds only even integers: products of
    odd magnitude make every fp32 running sum round, so an fp32 accumulator would be off (the
    sequential one by a computed amount) while int32 is exact before the one final rounding."""
    m, k, n = 4, 2048, 24
    sign = torch.tensor([1, -1, 1, -1], dtype=I8)[:, None]
    a = torch.randint(100, 128, (m, k), dtype=I8) * sign
    w = torch.randint(100, 128, (n, k), dtype=I8)
    exact = (a.cpu().long() @ w.cpu().long().t()).to(a.device)  # CUDA has no int64 GEMM
    assert exact.abs().min() > 2 ** 24
    fp32_error = (_fp32_sequential(a, w.t()).double() - exact.double()).abs()
    assert (fp32_error > 0).float().mean() > 0.9  # the premise: fp32 accumulation is not exact here
    out = torch.empty(m, n)
    OPS.scaled_mm(out, a, w.t(), torch.ones(1), torch.ones(1), None)
    assert torch.equal(out, exact.to(torch.float32))  # int32 sum, one int -> fp32 rounding
