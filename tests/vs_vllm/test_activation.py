"""silu_and_mul, gelu_tanh_and_mul, gelu_and_mul vs vLLM's CPU kernels (torch.ops._C), same inputs
and call, on both of our paths.

vLLM's CPU activations need d % 8 == 0 (d = 776 = 8·97 here) and read rows as contiguous whatever
the row stride, so for strided rows vLLM gets a contiguous copy and ours the slice.

Both sides compute act(gate)·up in fp32 and round once; they differ in the last bits of exp/tanh/erf.
silu is held in ulps. The GELUs are not: for gate < ~-5 torch's 0.5·x·(1 + tanh(.)) is exactly 0
and vLLM's ~1e-6, millions of ulps apart, and where 1 + erf(x/√2) cancels, one ulp of erf is many
of the result; they are held relative to the operands' magnitude:
|ours - vLLM| <= limit · eps · |gate·up|. Measured on 2000 x 776 rows of 3·randn (Triton path:
600 rows) against all three vLLM builds; see _compare for the bf16 keys."""
import pytest
import torch

from vllm_kernels import bf16_rounds_nearest
from vs_vllm._compare import (
    DTYPES, EXACT, PATHS, Bound, assert_relative, assert_ulps, bound_for, dtype_id, on_path,
)

D = 776

# (max ulps, max share differing): measured maximum, fp32 +1 ulp, shares +0.06.
SILU = {
    torch.float32: {"reference": Bound(5, 0.10), "triton": Bound(6, 0.37)},  # 4 / 0.04, Triton 5 / 0.31
    torch.float16: Bound(1, 0.02),  # 1 / < 0.001
    torch.bfloat16: {"NN": Bound(1, 0.02), "NT": Bound(1, 0.56), "TN": Bound(1, 0.56), "TT": Bound(1, 0.02)},
}
# (max |ours - vLLM| / (eps·|gate·up|), max share differing): measured maximum +10 %, shares +0.06.
GELU_TANH = {
    torch.float32: {"reference": Bound(2.5, 0.14), "triton": Bound(2.6, 0.59)},  # 2.23 / 0.08, Triton 2.34 / 0.53
    torch.float16: {"reference": Bound(0.8, 0.06), "triton": Bound(1.1, 0.11)},  # 0.73 / 0.003, Triton 0.99 / 0.05
    torch.bfloat16: {"NN": Bound(0.15, 0.06), "NT": Bound(1.1, 0.54), "TN": Bound(1.1, 0.59), "TT": Bound(1.1, 0.13)},
}
# Our reference is torch's fp32 F.gelu; the Triton kernel's erf (under the interpreter: fp64 erf,
# rounded) gives vLLM's results bit for bit in all three builds.
GELU = {
    torch.float32: {"reference": Bound(3.1, 0.62), "triton": EXACT},  # 2.79 / 0.55
    torch.float16: {"reference": Bound(1.1, 0.11), "triton": EXACT},  # 0.96 / 0.05
    torch.bfloat16: {"NN": Bound(0.006, 0.09), "NT": Bound(1.1, 0.55), "TN": Bound(1.1, 0.55), "TT": EXACT},
    # NN 0.005 / 0.03, NT 0.996 / 0.48, TN 0.996 / 0.48
}
OPS = {"silu_and_mul": SILU, "gelu_tanh_and_mul": GELU_TANH, "gelu_and_mul": GELU}


def _input(layout: str, dtype: torch.dtype) -> torch.Tensor:
    if layout == "rows":
        return torch.randn(8, 2 * D, dtype=dtype) * 3
    if layout == "strided":  # rows of a wider tensor: only the last dim is contiguous
        return (torch.randn(8, 2 * D + 40, dtype=dtype) * 3)[:, :2 * D]
    if layout == "3d":
        return torch.randn(2, 4, 2 * D, dtype=dtype) * 3
    return torch.randn(0, 2 * D, dtype=dtype)


@pytest.mark.parametrize("layout", ["rows", "strided", "3d", "empty"])
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("name", list(OPS))
def test_gated_activation(vllm_ops, name, dtype, path, layout):
    x = _input(layout, dtype)
    out_shape = (*x.shape[:-1], D)
    theirs = torch.empty(out_shape, dtype=dtype)
    getattr(vllm_ops, name)(theirs, x.contiguous())
    ours = on_path(path, getattr(torch.ops.ascend, name), [torch.empty(out_shape, dtype=dtype), x])[0]
    bound = bound_for(OPS[name], dtype, path, bf16_rounds_nearest())
    if name == "silu_and_mul":
        assert_ulps(ours, theirs, bound, name)
    else:
        assert_relative(ours, theirs, x[..., :D].float().abs() * x[..., D:].float().abs(), bound, name)


def test_vllm_refuses_d_not_a_multiple_of_8_which_we_take(vllm_ops):
    x = torch.randn(3, 2 * 13)
    with pytest.raises(RuntimeError, match="VEC_ELEM_NUM"):
        vllm_ops.silu_and_mul(torch.empty(3, 13), x)
    out = torch.empty(3, 13)
    torch.ops.ascend.silu_and_mul(out, x)
    torch.testing.assert_close(out, torch.nn.functional.silu(x[:, :13]) * x[:, 13:])
