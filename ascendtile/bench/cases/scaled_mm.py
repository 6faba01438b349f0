"""scaled_mm (int8 GEMM with per-token and per-channel scales) and w8a8_linear (dynamic per-token
activation quantization + that GEMM) over the MLP up-projections [hidden -> intermediate] of real
models x token counts; baseline npu_quant_matmul for scaled_mm."""
from __future__ import annotations

import torch

from ascendtile.bench.cases import KernelCase, bench_cases, element_size, token_counts, torch_npu
from ascendtile.lowering.shape_grid import HIDDEN_SIZES, INTERMEDIATE_SIZES


def _operands(m: int, k: int, n: int, device: torch.device):
    a = torch.randint(-127, 128, (m, k), dtype=torch.int8, device=device)
    weight = torch.randint(-127, 128, (n, k), dtype=torch.int8, device=device)  # nn.Linear layout [N, K]
    a_scales = torch.rand(m, 1, dtype=torch.float32, device=device) / 100
    b_scales = torch.rand(n, dtype=torch.float32, device=device) / 100
    return a, weight, a_scales, b_scales


def _scaled_mm(m: int, k: int, n: int, dtype: torch.dtype) -> KernelCase:
    def setup(device):
        a, weight, a_scales, b_scales = _operands(m, k, n, device)
        out = torch.empty(m, n, dtype=dtype, device=device)
        return lambda: torch.ops.ascend.scaled_mm(out, a, weight.t(), a_scales, b_scales, None)

    def baseline(device):
        a, weight, a_scales, b_scales = _operands(m, k, n, device)
        return lambda: torch_npu().npu_quant_matmul(a, weight.t(), b_scales, pertoken_scale=a_scales.view(-1),
                                                    output_dtype=dtype)

    return KernelCase(
        "scaled_mm", "scaled_mm", {"m": m, "k": k, "n": n}, dtype,
        bytes_moved=m * k + k * n + m * n * element_size(dtype) + 4 * (m + n),  # int8 operands, output, scales
        flops=2 * m * n * k, setup=setup, baseline=baseline, baseline_name="npu_quant_matmul",
    )


def _w8a8_linear(m: int, k: int, n: int, dtype: torch.dtype) -> KernelCase:
    def setup(device):
        _, weight, _, weight_scale = _operands(m, k, n, device)
        x = torch.randn(m, k, dtype=dtype, device=device)
        return lambda: torch.ops.ascend.w8a8_linear(x, weight, weight_scale, None, None)

    return KernelCase(
        "scaled_mm", "w8a8_linear", {"m": m, "k": k, "n": n}, dtype,
        bytes_moved=m * k * element_size(dtype) + k * n + m * n * element_size(dtype) + 4 * n,
        flops=2 * m * n * k + 3 * m * k,  # the GEMM plus the activation quantization
        setup=setup,
    )


@bench_cases("scaled_mm")
def _cases(dtype: torch.dtype, quick: bool) -> list[KernelCase]:
    shapes = list(zip(HIDDEN_SIZES, INTERMEDIATE_SIZES))[:1 if quick else None]
    return [make(m, k, n, dtype) for make in (_scaled_mm, _w8a8_linear) for k, n in shapes for m in token_counts(quick)]
