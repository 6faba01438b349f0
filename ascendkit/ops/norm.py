"""Ops: rms_norm, fused_add_rms_norm (vLLM argument order)."""
from __future__ import annotations

import torch

from ascendkit.ops._registry import register_op
from ascendkit.ops._validate import (
    FLOAT_DTYPES, check_positive, check_rows_viewable, check_same_device, check_same_dtype, check_shape, check_tensor,
)
from ascendkit.ops.reference import norm as reference


def _check_weight(weight: torch.Tensor, hidden: int, epsilon: float) -> None:
    check_tensor("weight", weight, dtypes=FLOAT_DTYPES, ndim=1, contiguous=True)
    check_shape("weight", weight, (hidden,), "the hidden size of input")
    check_positive("epsilon", epsilon)


def _validate_rms_norm(out: torch.Tensor, input: torch.Tensor, weight: torch.Tensor, epsilon: float) -> None:
    check_tensor("input", input, dtypes=FLOAT_DTYPES, ndim=(2, 3))
    check_tensor("out", out, dtypes=FLOAT_DTYPES, ndim=(2, 3))
    check_same_device(input=input, out=out, weight=weight)
    check_shape("out", out, input.shape, "same as input")
    check_same_dtype(input=input, out=out, weight=weight)
    check_rows_viewable("input", input)
    check_rows_viewable("out", out)
    _check_weight(weight, input.shape[-1], epsilon)


def _validate_fused_add_rms_norm(input: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, epsilon: float) -> None:
    check_tensor("input", input, dtypes=FLOAT_DTYPES, ndim=(2, 3))
    check_tensor("residual", residual, dtypes=FLOAT_DTYPES, ndim=(2, 3))
    check_same_device(input=input, residual=residual, weight=weight)
    check_shape("residual", residual, input.shape, "same as input")
    check_same_dtype(input=input, residual=residual, weight=weight)
    check_rows_viewable("input", input)
    check_rows_viewable("residual", residual)
    _check_weight(weight, input.shape[-1], epsilon)


rms_norm_op = register_op(
    "rms_norm",
    "(Tensor! out, Tensor input, Tensor weight, float epsilon) -> ()",
    validate=_validate_rms_norm,
    reference=reference.rms_norm,
    triton="ascendkit.kernels.norm:rms_norm",
)

fused_add_rms_norm_op = register_op(
    "fused_add_rms_norm",
    "(Tensor! input, Tensor! residual, Tensor weight, float epsilon) -> ()",
    validate=_validate_fused_add_rms_norm,
    reference=reference.fused_add_rms_norm,
    triton="ascendkit.kernels.norm:fused_add_rms_norm",
)


def rms_norm(input: torch.Tensor, weight: torch.Tensor, epsilon: float = 1e-6) -> torch.Tensor:
    """RMSNorm of input [..., hidden] (fp16/bf16/fp32, rows may be strided) with weight [hidden]
    of the same dtype; returns a new contiguous tensor shaped like input."""
    out = torch.empty(input.shape, dtype=input.dtype, device=input.device)
    rms_norm_op(out, input, weight, epsilon)
    return out


def fused_add_rms_norm(
    input: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, epsilon: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """residual <- input + residual; input <- rms_norm(residual) * weight. Both [..., hidden],
    same dtype, updated in place; returns (input, residual) for chaining."""
    fused_add_rms_norm_op(input, residual, weight, epsilon)
    return input, residual
