"""w4a16_linear, the op contract: the reference vs an independent float64 construction (exact
dequantization, one rounding of the output), the packed layout against compressed-tensors' int32
packing, NaN/inf rows, opcheck and torch.compile on both kernel paths, bad inputs. (Triton kernel
vs reference numerics: tests/kernels/test_w4a16.py.)"""
import pytest
import torch

import ascendtile.ops as ak
from ascendtile.ops.reference.w4a16 import dequantize_w4a16, pack_nibbles, unpack_nibbles
from opchecks import op_contract_tests, raises_naming
from ops._w4a16 import float64_linear, float64_weight, random_w4a16
from tolerances import assert_close

OPS = torch.ops.ascend
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,k,n,group_size,has_bias", [
    (1, 576, 960, 32, False),  # SmolLM2 merged qkv, GGUF Q4 groups
    (7, 1536, 576, 128, True),
    (33, 640, 130, 64, True),
    (5, 576, 70, 576, False),  # one group per row (per channel)
    (3, 192, 40, 96, True),  # a group size that is not a power of two
])
def test_reference_matches_float64_formula(dtype, m, k, n, group_size, has_bias):
    qweight, scales, mins = random_w4a16(n, k, group_size)
    x = torch.randn(m, k).to(dtype)
    bias = torch.randn(n).to(dtype) if has_bias else None
    got = ak.w4a16_linear(x, qweight, scales, mins, group_size, bias)
    assert got.shape == (m, n) and got.dtype == dtype
    assert_close(got, float64_linear(x, qweight, scales, mins, group_size, bias))


@pytest.mark.parametrize("symmetric", [False, True])
def test_dequantization_is_exact(symmetric):
    """q·scale is exact in fp32 for fp16 scales and the sum is rounded once: the reference's fp32
    weight is the float64 value rounded to fp32, bit for bit (what gguf's and vLLM's dequantizers
    produce)."""
    qweight, scales, mins = random_w4a16(64, 256, 32, symmetric)
    assert torch.equal(dequantize_w4a16(qweight, scales, mins, 32), float64_weight(qweight, scales, mins, 32).float())


def test_packing_is_compressed_tensors_int32_little_endian():
    """compressed-tensors packs eight 4-bit values per int32, value k at bits 4·(k % 8): its
    weight_packed [N, K/8] read as bytes is qweight [N, K/2]."""
    q = torch.randint(0, 16, (6, 64), dtype=torch.int64)
    shifts = 4 * torch.arange(8)
    words = (q.view(6, 8, 8) << shifts).sum(-1)  # < 2^32: reinterpret as int32 two's complement
    packed = torch.where(words >= 2 ** 31, words - 2 ** 32, words).to(torch.int32)
    assert torch.equal(packed.view(torch.uint8), pack_nibbles(q))
    assert torch.equal(unpack_nibbles(pack_nibbles(q)), q.to(torch.uint8))


@pytest.mark.parametrize("layout", ["strided", "3d", "1d"])
def test_input_layouts(layout):
    qweight, scales, mins = random_w4a16(24, 128, 32)
    if layout == "strided":
        x = torch.randn(9, 160)[:, :128]  # rows with a pitch of 160
    elif layout == "3d":
        x = torch.randn(2, 5, 128)
    else:
        x = torch.randn(128)
    got = ak.w4a16_linear(x, qweight, scales, mins, 32)
    assert got.shape == (*x.shape[:-1], 24)
    assert_close(got, float64_linear(x.reshape(-1, 128), qweight, scales, mins, 32, None).reshape(got.shape))


@pytest.mark.parametrize("path", ["reference", "triton"])
def test_zero_rows(path, monkeypatch):
    monkeypatch.setenv("ASCENDTILE_KERNELS", path)
    qweight, scales, mins = random_w4a16(24, 128, 64)
    assert ak.w4a16_linear(torch.randn(0, 128, dtype=torch.float16), qweight, scales, mins, 64).shape == (0, 24)
    assert ak.w4a16_linear(torch.randn(2, 0, 128), qweight, scales, mins, 64).shape == (2, 0, 24)


def test_nonfinite_rows_stay_in_their_rows():
    qweight, scales, mins = random_w4a16(40, 256, 32)
    x = torch.randn(6, 256)
    x[1, 17] = float("nan")
    x[4, 200] = float("inf")
    got = ak.w4a16_linear(x, qweight, scales, mins, 32)
    clean = [0, 2, 3, 5]
    assert got[1].isnan().all() and not got[4].isfinite().any()
    assert_close(got[clean], float64_linear(x[clean], qweight, scales, mins, 32, None))


def _sample(dtype=torch.float32, bias=True):
    qweight, scales, mins = random_w4a16(40, 192, 64)
    return [torch.randn(7, 192).to(dtype), qweight, scales, mins, 64, torch.randn(40).to(dtype) if bias else None]


test_opcheck, test_compile = op_contract_tests({
    "w4a16_linear": _sample,
    "w4a16_linear:fp16_no_bias": lambda: _sample(torch.float16, bias=False),
})


def test_bad_inputs(values_checked):
    x, (qweight, scales, mins) = torch.randn(4, 64), random_w4a16(8, 64, 32)
    op = OPS.w4a16_linear
    raises_naming(TypeError, "input", op, x.long(), qweight, scales, mins, 32, None)
    raises_naming(ValueError, "input", op, torch.tensor(1.0), qweight, scales, mins, 32, None)
    raises_naming(ValueError, "input", op, torch.randn(64, 4).t(), qweight, scales, mins, 32, None)
    raises_naming(ValueError, "input", op, torch.randn(4, 0), qweight[:, :0], scales[:, :0], mins[:, :0], 32, None)
    raises_naming(ValueError, "input", op, torch.randn(4, 63), qweight, scales, mins, 32, None)
    raises_naming(ValueError, "input", op, torch.randn(2, 6, 64)[:, :3], qweight, scales, mins, 32, None)
    raises_naming(TypeError, "qweight", op, x, qweight.to(torch.int8), scales, mins, 32, None)
    raises_naming(ValueError, "qweight", op, x, torch.zeros(8, 64, dtype=torch.uint8), scales, mins, 32, None)
    raises_naming(ValueError, "qweight", op, x, torch.zeros(64, 8, dtype=torch.uint8).t(), scales, mins, 32, None)
    raises_naming(ValueError, "qweight", op, x, qweight.to("meta"), scales, mins, 32, None)
    raises_naming(ValueError, "group_size", op, x, qweight, scales, mins, 48, None)
    raises_naming(ValueError, "group_size", op, x, qweight, scales, mins, 0, None)
    raises_naming(ValueError, "group_size", op, torch.randn(4, 96), torch.zeros(8, 48, dtype=torch.uint8),
                  scales[:, :1].repeat(1, 3), mins[:, :1].repeat(1, 3), 64, None)
    raises_naming(TypeError, "scales", op, x, qweight, scales.half(), mins, 32, None)
    raises_naming(ValueError, "scales", op, x, qweight, scales[:, :1], mins, 32, None)
    raises_naming(ValueError, "scales", op, x, qweight, scales.t().contiguous().t(), mins, 32, None)
    raises_naming(ValueError, "mins", op, x, qweight, scales, mins[:7], 32, None)
    raises_naming(TypeError, "mins", op, x, qweight, scales, mins.double(), 32, None)
    raises_naming(TypeError, "bias", op, x, qweight, scales, mins, 32, torch.ones(8).half())
    raises_naming(ValueError, "bias", op, x, qweight, scales, mins, 32, torch.ones(9))
    raises_naming(ValueError, "bias", op, x, qweight, scales, mins, 32, torch.ones(8, 1))


@pytest.mark.parametrize("path", ["reference", "triton"])
def test_bad_input_fails_before_any_kernel(path, monkeypatch):
    monkeypatch.setenv("ASCENDTILE_KERNELS", path)
    x, (qweight, scales, mins) = torch.randn(4, 64), random_w4a16(8, 64, 32)
    with pytest.raises(ValueError, match="^mins"):
        OPS.w4a16_linear(x, qweight, scales, mins[:, :1], 32, None)
