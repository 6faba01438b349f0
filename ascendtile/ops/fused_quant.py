"""Ops: RMSNorm / SiLU·mul fused with int8 quantization (vLLM's names and argument orders; vLLM's
static fused norm ops are fp8-only, ours take its argument order with int8 in the name).

Symmetric only (no zero point); each equals the unfused pair (rms_norm / fused_add_rms_norm /
silu_and_mul, then static_scaled_int8_quant or dynamic_scaled_int8_quant) within one int8 step.
"""
from __future__ import annotations

import torch

from ascendtile.ops._registry import register_op
from ascendtile.ops.quant import check_int8_rows
from ascendtile.ops._validate import (
    FLOAT_DTYPES, FP32, INT8, check_nonempty_rows, check_numel, check_positive, check_rows_viewable,
    check_same_device, check_same_dtype, check_shape, check_tensor,
)


def _check_norm(result: torch.Tensor, input: torch.Tensor, weight: torch.Tensor, epsilon: float,
                residual: torch.Tensor | None) -> int:
    """input [..., hidden] float, result int8 of its shape, weight [hidden], residual like input;
    returns the number of rows."""
    rows = check_int8_rows(result, input, "result")
    check_tensor("weight", weight, dtypes=FLOAT_DTYPES, ndim=1, contiguous=True)
    check_shape("weight", weight, (input.shape[-1],), "the hidden size of input")
    check_same_dtype(input=input, weight=weight)
    if residual is not None:
        check_tensor("residual", residual, dtypes=FLOAT_DTYPES, ndim=(2, 3))
        check_shape("residual", residual, input.shape, "same as input")
        check_same_dtype(input=input, residual=residual)
        check_rows_viewable("residual", residual)
    check_positive("epsilon", epsilon)
    return rows


def _check_static_scale(scale: torch.Tensor) -> None:
    check_tensor("scale", scale, dtypes=FP32)
    check_numel("scale", scale, (1,), "one per-tensor scale")


def _validate_dynamic(result: torch.Tensor, input: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor,
                      epsilon: float, scale_ub: torch.Tensor | None, residual: torch.Tensor | None) -> None:
    rows = _check_norm(result, input, weight, epsilon, residual)
    check_tensor("scale", scale, dtypes=FP32, contiguous=True)
    check_numel("scale", scale, (rows,), "one scale per token")
    if scale_ub is not None:
        raise ValueError("scale_ub: an upper bound on the scale is for fp8 outputs (as in vLLM); int8 takes None")
    check_same_device(input=input, result=result, weight=weight, scale=scale, residual=residual)


def _validate_static(result: torch.Tensor, input: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor,
                     epsilon: float) -> None:
    _check_norm(result, input, weight, epsilon, None)
    _check_static_scale(scale)
    check_same_device(input=input, result=result, weight=weight, scale=scale)


def _validate_add_static(result: torch.Tensor, input: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                         scale: torch.Tensor, epsilon: float) -> None:
    if residual is None:
        raise TypeError("residual: expected a torch.Tensor, got None")
    _check_norm(result, input, weight, epsilon, residual)
    _check_static_scale(scale)
    check_same_device(input=input, result=result, residual=residual, weight=weight, scale=scale)


def _validate_silu(result: torch.Tensor, input: torch.Tensor, scale: torch.Tensor) -> None:
    check_tensor("input", input, dtypes=FLOAT_DTYPES, ndim=(2, 3))
    check_tensor("result", result, dtypes=INT8, ndim=(2, 3))
    if input.shape[-1] % 2:
        raise ValueError(f"input: last dim must be even (gate and up halves), got {input.shape[-1]}")
    check_shape("result", result, (*input.shape[:-1], input.shape[-1] // 2), "input's shape with the last dim halved")
    check_rows_viewable("input", input)
    check_rows_viewable("result", result)
    check_nonempty_rows("input", input)
    _check_static_scale(scale)
    check_same_device(input=input, result=result, scale=scale)


rms_norm_dynamic_per_token_quant_op = register_op(
    "rms_norm_dynamic_per_token_quant",
    "(Tensor! result, Tensor input, Tensor weight, Tensor! scale, float epsilon, Tensor? scale_ub, "
    "Tensor!? residual) -> ()",
    validate=_validate_dynamic)
rms_norm_static_int8_quant_op = register_op(
    "rms_norm_static_int8_quant",
    "(Tensor! result, Tensor input, Tensor weight, Tensor scale, float epsilon) -> ()",
    validate=_validate_static)
fused_add_rms_norm_static_int8_quant_op = register_op(
    "fused_add_rms_norm_static_int8_quant",
    "(Tensor! result, Tensor input, Tensor! residual, Tensor weight, Tensor scale, float epsilon) -> ()",
    validate=_validate_add_static)
silu_and_mul_quant_op = register_op(
    "silu_and_mul_quant", "(Tensor! result, Tensor input, Tensor scale) -> ()", validate=_validate_silu)


def _int8_like(input: torch.Tensor) -> torch.Tensor:
    return torch.empty(input.shape, dtype=torch.int8, device=input.device)


def rms_norm_dynamic_per_token_quant(
    input: torch.Tensor, weight: torch.Tensor, epsilon: float = 1e-6, residual: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """rms_norm(input) (or, with residual: residual <- input + residual in place, then rms_norm of
    it) quantized per token. input / residual [..., hidden] fp16/bf16/fp32, weight [hidden] of the
    same dtype. Returns (int8 [..., hidden], fp32 scales [..., 1] = max|y| / 127; 0 for a zero row)."""
    result = _int8_like(input)
    scale = torch.empty((*input.shape[:-1], 1), dtype=torch.float32, device=input.device)
    rms_norm_dynamic_per_token_quant_op(result, input, weight, scale, epsilon, None, residual)
    return result, scale


def rms_norm_static_int8_quant(input: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor,
                               epsilon: float = 1e-6) -> torch.Tensor:
    """int8 [..., hidden] = saturate(round_half_even(rms_norm(input) / scale)); input [..., hidden]
    fp16/bf16/fp32, weight [hidden] of its dtype, scale one fp32 value."""
    result = _int8_like(input)
    rms_norm_static_int8_quant_op(result, input, weight, scale, epsilon)
    return result


def fused_add_rms_norm_static_int8_quant(
    input: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, epsilon: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """residual <- input + residual (in place, model dtype); returns (int8 [..., hidden] =
    static quant of rms_norm(residual) with the one fp32 scale, residual). input is not written."""
    result = _int8_like(input)
    fused_add_rms_norm_static_int8_quant_op(result, input, residual, weight, scale, epsilon)
    return result, residual


def silu_and_mul_quant(input: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """input [..., 2d] fp16/bf16/fp32 -> int8 [..., d] = static quant (one fp32 scale) of
    silu(input[..., :d]) * input[..., d:] rounded to input's dtype. Static only: a dynamic
    per-token scale needs the whole row's max before any value is written (use silu_and_mul +
    dynamic_scaled_int8_quant)."""
    result = torch.empty((*input.shape[:-1], input.shape[-1] // 2), dtype=torch.int8, device=input.device)
    silu_and_mul_quant_op(result, input, scale)
    return result
