"""silu_and_mul over the Llama-family MLP intermediate sizes x token counts; baseline npu_swiglu."""
from __future__ import annotations

import torch

from ascendkit.bench.cases import KernelCase, bench_cases, element_size, token_counts, torch_npu
from ascendkit.kernels.shape_grid import INTERMEDIATE_SIZES


def _silu_and_mul(tokens: int, inter: int, dtype: torch.dtype) -> KernelCase:
    def setup(device):
        x = torch.randn(tokens, 2 * inter, dtype=dtype, device=device)
        out = torch.empty(tokens, inter, dtype=dtype, device=device)
        return lambda: torch.ops.ascend.silu_and_mul(out, x)

    def baseline(device):
        x = torch.randn(tokens, 2 * inter, dtype=dtype, device=device)
        return lambda: torch_npu().npu_swiglu(x, dim=-1)  # silu(first half) * second half

    return KernelCase(
        "activation", "silu_and_mul", {"tokens": tokens, "intermediate": inter}, dtype,
        bytes_moved=3 * tokens * inter * element_size(dtype),  # read gate and up, write out
        flops=5 * tokens * inter,  # exp, add, divide (sigmoid), two multiplies
        setup=setup, baseline=baseline, baseline_name="npu_swiglu",
    )


@bench_cases("activation")
def _cases(dtype: torch.dtype, quick: bool) -> list[KernelCase]:
    sizes = INTERMEDIATE_SIZES[:1] if quick else INTERMEDIATE_SIZES
    return [_silu_and_mul(t, i, dtype) for i in sizes for t in token_counts(quick)]
