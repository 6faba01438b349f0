"""The fused norm / SiLU·mul + int8 quant ops beside the unfused pair of existing ops doing the same
job (op name "a+b"), over hidden sizes (MLP widths for SiLU·mul) x token counts. Bytes are each
variant's compulsory traffic: the pair also writes and re-reads the model-dtype activation."""
from __future__ import annotations

from typing import Callable

import torch

from ascendtile.bench.cases import KernelCase, bench_cases, element_size, hidden_sizes, token_counts
from ascendtile.lowering.shape_grid import INTERMEDIATE_SIZES

EPS = 1e-6
OPS = torch.ops.ascend


def _norm_case(op: str, fused: bool, tokens: int, hidden: int, dtype: torch.dtype) -> KernelCase:
    residual = "fused_add" in op or "residual" in op
    dynamic = "dynamic" in op

    def setup(device: torch.device) -> Callable[[], object]:
        x = torch.randn(tokens, hidden, dtype=dtype, device=device)
        r, w = torch.randn_like(x), torch.rand(hidden, dtype=dtype, device=device) + 0.5
        q = torch.empty(tokens, hidden, dtype=torch.int8, device=device)
        s = torch.empty(tokens, 1, device=device) if dynamic else torch.full((1,), 0.02, device=device)
        y = torch.empty_like(x)
        res = r if residual else None
        if fused and dynamic:
            return lambda: OPS.rms_norm_dynamic_per_token_quant(q, x, w, s, EPS, None, res)
        if fused:
            return (lambda: OPS.fused_add_rms_norm_static_int8_quant(q, x, r, w, s, EPS)) if residual else \
                (lambda: OPS.rms_norm_static_int8_quant(q, x, w, s, EPS))
        quant = (lambda: OPS.dynamic_scaled_int8_quant(q, y, s, None)) if dynamic else \
            (lambda: OPS.static_scaled_int8_quant(q, y, s, None))
        # In place on y (a copy of x would be timed too): repeated calls only change values.
        norm = (lambda: OPS.fused_add_rms_norm(y, r, w, EPS)) if residual else (lambda: OPS.rms_norm(y, x, w, EPS))
        return lambda: (norm(), quant())

    size = element_size(dtype)
    moved = tokens * hidden * (size + 1) + hidden * size + (tokens * 4 if dynamic else 0)  # x, int8, weight, scales
    moved += 2 * tokens * hidden * size if residual else 0  # read and write the residual
    moved += 0 if fused else 2 * tokens * hidden * size  # the pair writes y and reads it back
    name = op if fused else ("fused_add_rms_norm" if residual else "rms_norm") + \
        ("+dynamic_scaled_int8_quant" if dynamic else "+static_scaled_int8_quant")
    return KernelCase(
        "fused_quant", name,
        {"tokens": tokens, "hidden": hidden}, dtype, bytes_moved=moved,
        flops=(5 if residual else 4) * tokens * hidden + (3 if dynamic else 2) * tokens * hidden,
        setup=setup,
    )


def _silu_case(fused: bool, tokens: int, d: int, dtype: torch.dtype) -> KernelCase:
    def setup(device: torch.device) -> Callable[[], object]:
        x = torch.randn(tokens, 2 * d, dtype=dtype, device=device)
        q = torch.empty(tokens, d, dtype=torch.int8, device=device)
        s, y = torch.full((1,), 0.02, device=device), torch.empty(tokens, d, dtype=dtype, device=device)
        if fused:
            return lambda: OPS.silu_and_mul_quant(q, x, s)
        return lambda: (OPS.silu_and_mul(y, x), OPS.static_scaled_int8_quant(q, y, s, None))

    size = element_size(dtype)
    return KernelCase(
        "fused_quant", "silu_and_mul_quant" if fused else "silu_and_mul+static_scaled_int8_quant",
        {"tokens": tokens, "d": d}, dtype,
        bytes_moved=tokens * d * (2 * size + 1) + (0 if fused else 2 * tokens * d * size),
        flops=6 * tokens * d,  # sigmoid (~3), two multiplies, divide and round
        setup=setup,
    )


NORM_OPS = ("rms_norm_dynamic_per_token_quant", "rms_norm_dynamic_per_token_quant:residual",
            "rms_norm_static_int8_quant", "fused_add_rms_norm_static_int8_quant")


@bench_cases("fused_quant")
def _cases(dtype: torch.dtype, quick: bool) -> list[KernelCase]:
    widths = INTERMEDIATE_SIZES[:1] if quick else INTERMEDIATE_SIZES
    norm = [_norm_case(op, fused, t, h, dtype) for op in NORM_OPS for fused in (True, False)
            for h in hidden_sizes(quick) for t in token_counts(quick)]
    return norm + [_silu_case(fused, t, d, dtype) for fused in (True, False) for d in widths for t in token_counts(quick)]
