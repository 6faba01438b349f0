"""Ops: scaled_mm (int8 GEMM with a scaled epilogue, vLLM's cutlass_scaled_mm schema) and
w8a8_linear (quantize the activation, then scaled_mm against an int8 nn.Linear weight)."""
from __future__ import annotations

import torch

from ascendtile.ops._registry import register_op
from ascendtile.ops._validate import (
    FLOAT_DTYPES, FP32, INT8, check_nonempty_rows, check_numel, check_rows_viewable, check_same_device, check_shape,
    check_tensor,
)


def _check_scales(name: str, t: torch.Tensor, n: int, what: str) -> None:
    check_tensor(name, t, dtypes=FP32, contiguous=True)
    check_numel(name, t, (1, n), f"a scalar or one scale per {what}")


def _check_bias(bias: torch.Tensor | None, n: int, dtype: torch.dtype, like: str) -> None:
    if bias is None:
        return
    check_tensor("bias", bias, dtypes=FLOAT_DTYPES, ndim=1, contiguous=True)
    check_shape("bias", bias, (n,), "one per output column")
    if bias.dtype != dtype:
        raise TypeError(f"bias: dtype {bias.dtype} differs from {like} dtype {dtype}")


def _validate_scaled_mm(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, a_scales: torch.Tensor,
                        b_scales: torch.Tensor, bias: torch.Tensor | None) -> None:
    check_tensor("a", a, dtypes=INT8, ndim=2)
    check_tensor("b", b, dtypes=INT8, ndim=2, last_dim_contiguous=False)
    check_tensor("out", out, dtypes=FLOAT_DTYPES, ndim=2)
    check_same_device(out=out, a=a, b=b, a_scales=a_scales, b_scales=b_scales, bias=bias)
    m, k = a.shape
    if b.shape[0] != k:
        raise ValueError(f"b: expected [K={k}, N] to match a [M, K], got shape {tuple(b.shape)}")
    check_shape("out", out, (m, b.shape[1]), "[M, N]")
    _check_scales("a_scales", a_scales, m, "row of a")
    _check_scales("b_scales", b_scales, b.shape[1], "column of b")
    _check_bias(bias, b.shape[1], out.dtype, "out")


def _validate_w8a8_linear(input: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor,
                          input_scale: torch.Tensor | None, bias: torch.Tensor | None) -> None:
    check_tensor("input", input, dtypes=FLOAT_DTYPES, ndim=(2, 3))
    check_rows_viewable("input", input)
    check_nonempty_rows("input", input)
    check_tensor("weight", weight, dtypes=INT8, ndim=2)
    check_same_device(input=input, weight=weight, weight_scale=weight_scale, input_scale=input_scale, bias=bias)
    n, k = weight.shape
    if input.shape[-1] != k:
        raise ValueError(f"input: last dim {input.shape[-1]} differs from weight's in_features {k} (weight is [N, K])")
    check_tensor("weight_scale", weight_scale, dtypes=FP32, ndim=(1, 2), contiguous=True)
    if tuple(weight_scale.shape) not in ((n,), (n, 1)):
        raise ValueError(f"weight_scale: expected shape ({n},) or ({n}, 1), one per output channel, got {tuple(weight_scale.shape)}")
    if input_scale is not None:
        check_tensor("input_scale", input_scale, dtypes=FP32)
        check_numel("input_scale", input_scale, (1,), "one static per-tensor scale")
    _check_bias(bias, n, input.dtype, "input")


def _w8a8_linear_fake(input: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor,
                      input_scale: torch.Tensor | None, bias: torch.Tensor | None) -> torch.Tensor:
    return input.new_empty((*input.shape[:-1], weight.shape[0]))


SCALED_MM_SCHEMA = "(Tensor! out, Tensor a, Tensor b, Tensor a_scales, Tensor b_scales, Tensor? bias) -> ()"
scaled_mm_op = register_op("scaled_mm", SCALED_MM_SCHEMA, validate=_validate_scaled_mm)

W8A8_LINEAR_SCHEMA = "(Tensor input, Tensor weight, Tensor weight_scale, Tensor? input_scale, Tensor? bias) -> Tensor"
w8a8_linear_op = register_op("w8a8_linear", W8A8_LINEAR_SCHEMA, validate=_validate_w8a8_linear, fake=_w8a8_linear_fake)


def scaled_mm(a: torch.Tensor, b: torch.Tensor, a_scales: torch.Tensor, b_scales: torch.Tensor,
              out_dtype: torch.dtype, bias: torch.Tensor | None = None) -> torch.Tensor:
    """int8 a [M, K] @ int8 b [K, N] (any strides, e.g. weight.t()) accumulated in int32, then
    * a_scales (fp32, [M, 1] or one value) * b_scales (fp32, [N] or one value) + bias [N];
    returns [M, N] of out_dtype (fp16/bf16/fp32)."""
    out = torch.empty((a.shape[0], b.shape[1]), dtype=out_dtype, device=a.device)
    scaled_mm_op(out, a, b, a_scales, b_scales, bias)
    return out


def w8a8_linear(input: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor,
                input_scale: torch.Tensor | None = None, bias: torch.Tensor | None = None) -> torch.Tensor:
    """W8A8 linear: input [..., K] (fp16/bf16/fp32) quantized to int8 (per token when input_scale
    is None, else with that one fp32 scale), times int8 weight [N, K] with fp32 per-channel
    weight_scale [N] or [N, 1], plus bias [N] (input dtype). Returns [..., N] in input's dtype."""
    return w8a8_linear_op(input, weight, weight_scale, input_scale, bias)
