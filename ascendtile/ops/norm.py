"""Ops: rms_norm, fused_add_rms_norm (vLLM argument order)."""
from __future__ import annotations

import torch

from ascendtile.ops._registry import register_op, unchecked
from ascendtile.ops._validate import (
    FLOAT_DTYPES, check_positive, check_rows_viewable, check_same_device, check_same_dtype, check_shape, check_tensor,
)


def _check_rows_and_weight(first: tuple[str, torch.Tensor], second: tuple[str, torch.Tensor],
                           weight: torch.Tensor | None, epsilon: float) -> None:
    """Two same-shape, same-dtype row tensors [..., hidden] (rows viewable) and, when given,
    weight [hidden] of their dtype (None: no weight, as vLLM allows)."""
    (name_a, a), (name_b, b) = first, second
    check_tensor(name_a, a, dtypes=FLOAT_DTYPES, ndim=(2, 3))
    check_tensor(name_b, b, dtypes=FLOAT_DTYPES, ndim=(2, 3))
    check_same_device(**{name_a: a, name_b: b, "weight": weight})
    check_shape(name_b, b, a.shape, f"same as {name_a}")
    check_same_dtype(**{name_a: a, name_b: b})
    check_rows_viewable(name_a, a)
    check_rows_viewable(name_b, b)
    if weight is not None:
        check_same_dtype(**{name_a: a, "weight": weight})
        check_tensor("weight", weight, dtypes=FLOAT_DTYPES, ndim=1, contiguous=True)
        check_shape("weight", weight, (a.shape[-1],), f"the hidden size of {name_a}")
    check_positive("epsilon", epsilon)


def _validate_rms_norm(out: torch.Tensor, input: torch.Tensor, weight: torch.Tensor | None, epsilon: float) -> None:
    _check_rows_and_weight(("input", input), ("out", out), weight, epsilon)


def _validate_fused_add_rms_norm(input: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None,
                                 epsilon: float) -> None:
    _check_rows_and_weight(("input", input), ("residual", residual), weight, epsilon)


RMS_NORM_SCHEMA = "(Tensor! out, Tensor input, Tensor? weight, float epsilon) -> ()"
rms_norm_op = register_op("rms_norm", RMS_NORM_SCHEMA, validate=_validate_rms_norm)

FUSED_ADD_RMS_NORM_SCHEMA = "(Tensor! input, Tensor! residual, Tensor? weight, float epsilon) -> ()"
fused_add_rms_norm_op = register_op("fused_add_rms_norm", FUSED_ADD_RMS_NORM_SCHEMA,
                                    validate=_validate_fused_add_rms_norm)
_rms_norm_unchecked, _fused_add_rms_norm_unchecked = unchecked("rms_norm"), unchecked("fused_add_rms_norm")


def rms_norm(input: torch.Tensor, weight: torch.Tensor | None, epsilon: float = 1e-6, *,
             validate: bool = True) -> torch.Tensor:
    """RMSNorm of input [..., hidden] (fp16/bf16/fp32, rows may be strided) with weight [hidden]
    of the same dtype, or None for no weight (x * rsqrt(mean(x^2) + eps) in fp32, rounded once);
    returns a new contiguous tensor shaped like input.
    validate=False: no argument checks (`_registry.unchecked`: for callers valid by construction)."""
    out = torch.empty(input.shape, dtype=input.dtype, device=input.device)
    (rms_norm_op if validate else _rms_norm_unchecked)(out, input, weight, epsilon)
    return out


def fused_add_rms_norm(
    input: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None, epsilon: float = 1e-6, *,
    validate: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """residual <- input + residual; input <- rms_norm(residual) * weight (weight None: no
    weight). Both [..., hidden], same dtype (fp16/bf16/fp32), updated in place; weight [hidden]
    of that dtype; returns (input, residual) for chaining.
    validate=False: no argument checks (`_registry.unchecked`: for callers valid by construction)."""
    op = fused_add_rms_norm_op if validate else _fused_add_rms_norm_unchecked
    op(input, residual, weight, epsilon)
    return input, residual
