"""w4a16_linear vs vLLM's CPU W4A16 GEMM (torch.ops._C.cpu_gemm_wna16, what vLLM runs for
compressed-tensors / GPTQ int4 weights on CPU), on both of our paths: one int4 weight with
symmetric (vLLM's uint4b8: w = (q - 8)·s) and asymmetric (uint4 with zero points: w = (q - z)·s)
groups of 32 and 128, converted to our layout (scale s, min -z·s) and to vLLM's (its repacking in
vllm/model_executor/kernels/linear/mixed_precision/cpu.py: values packed eight to an int32 along
N, then blocked 16 output channels at a time; scales [groups, N] in the activation dtype; zero
points [groups, N/8] packed along N). vLLM's kernel takes fp16/bf16 only, 2-D input, K and N
multiples of 32; the AVX2 build (`_C_AVX2`) does not have it at all.

Both compute the same weight: s in the activation dtype makes (q - z)·s exact in fp32 on both
sides. vLLM rounds it to the activation dtype and accumulates in fp32, as our Triton kernel does;
our reference keeps the fp32 weight. So the distance is measured in eps · magnitude, magnitude =
|x|·|w|ᵀ + |bias| (what each output is made of). Our reference differs by vLLM's rounding of the
weight (up to ~0.2-0.26 eps·magnitude); our Triton kernel computes what vLLM does: fp16 outputs
are bit-identical but for ~0.4 % of them (fp32 summation order at a rounding tie), bf16 ones are
bit-identical against the build that truncates as the interpreter does (`_C_AVX512`)."""
import pytest
import torch

from ascendtile.ops.reference.w4a16 import pack_nibbles
from opchecks import kernel_path
from vllm_kernels import bf16_rounds_nearest, library_name
from vs_vllm._compare import EPS, PATHS, Bound, assert_relative, bound_for, dtype_id

# (max eps·magnitude, max share of outputs differing): measured maxima over three seeds, all four
# weights, both shapes, against `_C` (native bf16) and `_C_AVX512`, in the comments; bounds ~1.5x.
W4A16 = {
    torch.float16: {"reference": Bound(0.3, 0.6),  # 0.21 / 0.41
                    "triton": Bound(0.07, 0.01)},  # 0.046 / 0.004: single outputs, the rest bit-identical
    torch.bfloat16: {"NN": Bound(0.3, 0.6), "TN": Bound(0.36, 0.95),  # 0.20 / 0.39; 0.24 / 0.79
                     "NT": Bound(0.39, 0.95), "TT": Bound(0.01, 0.01)},  # 0.26 / 0.77; 0 / 0 (bit-identical)
}
M, N = 7, 192


def _pack_along_n(values: torch.Tensor) -> torch.Tensor:
    """int [K, N] 0..15 -> int32 [K, N/8]: output channel 8j + i at bits 4i of word j."""
    words = torch.zeros(values.shape[0], values.shape[1] // 8, dtype=torch.int64)
    for i in range(8):
        words |= values[:, i::8].long() << (4 * i)
    return torch.where(words >= 2 ** 31, words - 2 ** 32, words).to(torch.int32)


def _vllm_blocked_weight(q: torch.Tensor) -> torch.Tensor:
    """q [N, K] -> vLLM's CPU WNA16 weight [N/16, 2K] int32: per k, 16 output channels in 64 bits."""
    n, k = q.shape
    return _pack_along_n(q.t()).view(k, n // 16, 2).permute(1, 0, 2).reshape(n // 16, 2 * k).contiguous()


@pytest.fixture(scope="session")
def gemm_wna16(vllm_ops):
    if not hasattr(vllm_ops, "cpu_gemm_wna16"):
        pytest.skip(f"vLLM's {library_name()} has no cpu_gemm_wna16 (vLLM builds it only with AVX-512)")
    return vllm_ops.cpu_gemm_wna16


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=dtype_id)
@pytest.mark.parametrize("k,group_size", [(576, 32), (640, 128)])
@pytest.mark.parametrize("symmetric", [True, False], ids=["uint4b8", "uint4"])
def test_w4a16_linear_vs_vllm(gemm_wna16, path, dtype, k, group_size, symmetric):
    groups = k // group_size
    q = torch.randint(0, 16, (N, k))
    scales = (torch.rand(N, groups) * 0.02 + 0.005).to(dtype)
    zeros = torch.full((N, groups), 8) if symmetric else torch.randint(0, 16, (N, groups))
    x = torch.randn(M, k + 32).to(dtype)[:, :k]  # strided rows: both kernels take a row stride
    bias = torch.randn(N).to(dtype)

    theirs = torch.empty(M, N, dtype=dtype)
    gemm_wna16(x, _vllm_blocked_weight(q), theirs, scales.t().contiguous(),
               None if symmetric else _pack_along_n(zeros.t()), bias, 8, "vec")
    with kernel_path(path):
        ours = torch.ops.ascend.w4a16_linear(x, pack_nibbles(q), scales.float(), -zeros * scales.float(), group_size, bias)

    w = (q - zeros.repeat_interleave(group_size, 1)).double() * scales.double().repeat_interleave(group_size, 1)
    magnitude = x.double().abs() @ w.abs().t() + bias.double().abs()
    bound = bound_for(W4A16, dtype, path, bf16_rounds_nearest())
    assert_relative(ours, theirs, magnitude, bound, f"w4a16_linear {dtype_id(dtype)} {path}")
