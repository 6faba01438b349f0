"""silu_and_mul / gelu_tanh_and_mul / gelu_and_mul over the MLP intermediate sizes x token counts;
baselines: torch_npu's fused npu_swiglu and npu_geglu (approximate=1 is tanh, 0 erf; it also
writes gelu(gate) as a second output, and torch_npu versions disagree on which half its default
activates, which does not change the time)."""
from __future__ import annotations

import torch

from ascendtile.bench.cases import KernelCase, bench_cases, element_size, token_counts, torch_npu
from ascendtile.lowering.shape_grid import INTERMEDIATE_SIZES

# exp, add, divide (sigmoid), two multiplies; GeGLU adds the cubic polynomial (4 more); the erf
# GELU is 29 vector ops in BiShengIR's expansion (clamp, degree-5/5 rational, 0.5·x·(1 + .)·up)
FLOPS_PER_ELEMENT = {"silu_and_mul": 5, "gelu_tanh_and_mul": 9, "gelu_and_mul": 29}


def _baseline(op: str, x: torch.Tensor):
    if op == "silu_and_mul":
        return lambda: torch_npu().npu_swiglu(x, dim=-1)  # silu(first half) * second half
    approximate = 1 if op == "gelu_tanh_and_mul" else 0  # tanh / erf
    return lambda: torch_npu().npu_geglu(x, dim=-1, approximate=approximate)[0]  # gelu(one half) * other


def _gated(op: str, tokens: int, inter: int, dtype: torch.dtype) -> KernelCase:
    def setup(device):
        x = torch.randn(tokens, 2 * inter, dtype=dtype, device=device)
        out = torch.empty(tokens, inter, dtype=dtype, device=device)
        return lambda: getattr(torch.ops.ascend, op)(out, x)

    def baseline(device):
        return _baseline(op, torch.randn(tokens, 2 * inter, dtype=dtype, device=device))

    return KernelCase(
        "activation", op, {"tokens": tokens, "intermediate": inter}, dtype,
        bytes_moved=3 * tokens * inter * element_size(dtype),  # read gate and up, write out
        flops=FLOPS_PER_ELEMENT[op] * tokens * inter,
        setup=setup, baseline=baseline,
        baseline_name="npu_swiglu" if op == "silu_and_mul" else "npu_geglu",
    )


@bench_cases("activation")
def _cases(dtype: torch.dtype, quick: bool) -> list[KernelCase]:
    sizes = INTERMEDIATE_SIZES[:1] if quick else INTERMEDIATE_SIZES
    return [_gated(op, t, i, dtype) for op in FLOPS_PER_ELEMENT for i in sizes for t in token_counts(quick)]
