"""rms_norm, fused_add_rms_norm over hidden sizes x token counts; baselines npu_rms_norm /
npu_add_rms_norm."""
from __future__ import annotations

import torch

from ascendtile.bench.cases import KernelCase, bench_cases, element_size, hidden_sizes, token_counts, torch_npu

EPS = 1e-6


def _inputs(tokens: int, hidden: int, dtype: torch.dtype, device: torch.device):
    x = torch.randn(tokens, hidden, dtype=dtype, device=device)
    return x, torch.randn_like(x), torch.rand(hidden, dtype=dtype, device=device) + 0.5


def _rms_norm(tokens: int, hidden: int, dtype: torch.dtype) -> KernelCase:
    def setup(device):
        x, _, w = _inputs(tokens, hidden, dtype, device)
        out = torch.empty_like(x)
        return lambda: torch.ops.ascend.rms_norm(out, x, w, EPS)

    def baseline(device):
        x, _, w = _inputs(tokens, hidden, dtype, device)
        return lambda: torch_npu().npu_rms_norm(x, w, epsilon=EPS)

    size = element_size(dtype)
    return KernelCase(
        "norm", "rms_norm", {"tokens": tokens, "hidden": hidden}, dtype,
        bytes_moved=(2 * tokens * hidden + hidden) * size,  # read x, write out, read weight
        flops=4 * tokens * hidden,  # square, accumulate, scale by rstd, scale by weight
        setup=setup, baseline=baseline, baseline_name="npu_rms_norm",
    )


def _fused_add_rms_norm(tokens: int, hidden: int, dtype: torch.dtype) -> KernelCase:
    def setup(device):
        x, r, w = _inputs(tokens, hidden, dtype, device)
        # In place: repeated calls keep adding into the residual, which only changes values.
        return lambda: torch.ops.ascend.fused_add_rms_norm(x, r, w, EPS)

    def baseline(device):
        x, r, w = _inputs(tokens, hidden, dtype, device)
        return lambda: torch_npu().npu_add_rms_norm(x, r, w, EPS)

    size = element_size(dtype)
    return KernelCase(
        "norm", "fused_add_rms_norm", {"tokens": tokens, "hidden": hidden}, dtype,
        bytes_moved=(4 * tokens * hidden + hidden) * size,  # read x and residual, write both, read weight
        flops=5 * tokens * hidden,  # the add, then rms_norm's four
        setup=setup, baseline=baseline, baseline_name="npu_add_rms_norm",
    )


@bench_cases("norm")
def _cases(dtype: torch.dtype, quick: bool) -> list[KernelCase]:
    return [make(t, h, dtype) for make in (_rms_norm, _fused_add_rms_norm)
            for h in hidden_sizes(quick) for t in token_counts(quick)]
