"""Ops: static/dynamic int8 quantization (vLLM schemas)."""
from __future__ import annotations

import torch

from ascendtile.ops._registry import register_op
from ascendtile.ops._validate import (
    FLOAT_DTYPES, FP32, INT8, INT32, check_nonempty_rows, check_numel, check_rows_viewable, check_same_device,
    check_shape, check_tensor,
)


def check_int8_rows(out: torch.Tensor, input: torch.Tensor, out_name: str = "out") -> int:
    """input [..., hidden] float (2-D or 3-D, rows viewable), out int8 of its shape (named
    out_name); returns the number of rows. Shared with the fused norm/activation + quant ops."""
    check_tensor("input", input, dtypes=FLOAT_DTYPES, ndim=(2, 3))
    check_tensor(out_name, out, dtypes=INT8, ndim=(2, 3))
    check_shape(out_name, out, input.shape, "same as input")
    check_rows_viewable("input", input)
    check_rows_viewable(out_name, out)
    check_nonempty_rows("input", input)
    return input.numel() // input.shape[-1]


def _validate_static(out: torch.Tensor, input: torch.Tensor, scale: torch.Tensor, azp: torch.Tensor | None) -> None:
    check_int8_rows(out, input)
    check_tensor("scale", scale, dtypes=FP32)
    check_numel("scale", scale, (1,), "one per-tensor scale")
    if azp is not None:
        check_tensor("azp", azp, dtypes=INT32)
        check_numel("azp", azp, (1,), "one per-tensor zero point")
    check_same_device(input=input, out=out, scale=scale, azp=azp)


def _validate_dynamic(out: torch.Tensor, input: torch.Tensor, scales: torch.Tensor, azp: torch.Tensor | None) -> None:
    rows = check_int8_rows(out, input)
    check_tensor("scales", scales, dtypes=FP32, contiguous=True)
    check_numel("scales", scales, (rows,), "one scale per token")
    if azp is not None:
        check_tensor("azp", azp, dtypes=INT32, contiguous=True)
        check_numel("azp", azp, (rows,), "one zero point per token")
    check_same_device(input=input, out=out, scales=scales, azp=azp)


STATIC_SCALED_INT8_QUANT_SCHEMA = "(Tensor! out, Tensor input, Tensor scale, Tensor? azp) -> ()"
static_scaled_int8_quant_op = register_op("static_scaled_int8_quant", STATIC_SCALED_INT8_QUANT_SCHEMA,
                                          validate=_validate_static)

DYNAMIC_SCALED_INT8_QUANT_SCHEMA = "(Tensor! out, Tensor input, Tensor! scales, Tensor!? azp) -> ()"
dynamic_scaled_int8_quant_op = register_op("dynamic_scaled_int8_quant", DYNAMIC_SCALED_INT8_QUANT_SCHEMA,
                                           validate=_validate_dynamic)


def static_scaled_int8_quant(input: torch.Tensor, scale: torch.Tensor, azp: torch.Tensor | None = None) -> torch.Tensor:
    """input [..., K] (fp16/bf16/fp32) -> int8 [..., K] = saturate(round_half_even(x / scale) + azp);
    scale: one fp32 value, azp: one int32 value or None (symmetric)."""
    out = torch.empty(input.shape, dtype=torch.int8, device=input.device)
    static_scaled_int8_quant_op(out, input, scale, azp)
    return out


def dynamic_scaled_int8_quant(
    input: torch.Tensor, symmetric: bool = True
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Per-token int8 quantization of input [..., K] (fp16/bf16/fp32). Returns (out int8 [..., K],
    scales fp32 [..., 1], azp int32 [..., 1] or None). Symmetric: scale = max|x| / 127; asymmetric:
    scale = (max - min) / 255, azp = round(-128 - min / scale). All-zero rows get scale 0."""
    out = torch.empty(input.shape, dtype=torch.int8, device=input.device)
    scales = torch.empty((*input.shape[:-1], 1), dtype=torch.float32, device=input.device)
    azp = None if symmetric else torch.empty(scales.shape, dtype=torch.int32, device=input.device)
    dynamic_scaled_int8_quant_op(out, input, scales, azp)
    return out, scales, azp
