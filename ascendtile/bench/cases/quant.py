"""static / dynamic per-token int8 quantization over hidden sizes x token counts; baseline
npu_dynamic_quant for the dynamic one."""
from __future__ import annotations

import torch

from ascendtile.bench.cases import KernelCase, bench_cases, element_size, hidden_sizes, token_counts, torch_npu


def _static(tokens: int, hidden: int, dtype: torch.dtype) -> KernelCase:
    def setup(device):
        x = torch.randn(tokens, hidden, dtype=dtype, device=device)
        out = torch.empty(tokens, hidden, dtype=torch.int8, device=device)
        scale = torch.full((1,), 0.02, dtype=torch.float32, device=device)
        return lambda: torch.ops.ascend.static_scaled_int8_quant(out, x, scale, None)

    return KernelCase(
        "quant", "static_scaled_int8_quant", {"tokens": tokens, "hidden": hidden}, dtype,
        bytes_moved=tokens * hidden * (element_size(dtype) + 1),  # read x, write int8
        flops=2 * tokens * hidden,  # divide, round
        setup=setup,
    )


def _dynamic(tokens: int, hidden: int, dtype: torch.dtype) -> KernelCase:
    def setup(device):
        x = torch.randn(tokens, hidden, dtype=dtype, device=device)
        out = torch.empty(tokens, hidden, dtype=torch.int8, device=device)
        scales = torch.empty(tokens, 1, dtype=torch.float32, device=device)
        return lambda: torch.ops.ascend.dynamic_scaled_int8_quant(out, x, scales, None)

    def baseline(device):
        x = torch.randn(tokens, hidden, dtype=dtype, device=device)
        return lambda: torch_npu().npu_dynamic_quant(x)

    return KernelCase(
        "quant", "dynamic_scaled_int8_quant", {"tokens": tokens, "hidden": hidden}, dtype,
        bytes_moved=tokens * hidden * (element_size(dtype) + 1) + tokens * 4,  # read x, write int8 and scales
        flops=3 * tokens * hidden,  # |x| max, divide, round
        setup=setup, baseline=baseline, baseline_name="npu_dynamic_quant",
    )


@bench_cases("quant")
def _cases(dtype: torch.dtype, quick: bool) -> list[KernelCase]:
    return [make(t, h, dtype) for make in (_static, _dynamic) for h in hidden_sizes(quick) for t in token_counts(quick)]
