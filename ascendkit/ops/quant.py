"""Ops: static/dynamic int8 quantization, scaled_mm, w8a8_linear (vLLM schemas where vLLM has them)."""
from __future__ import annotations

import torch

from ascendkit.ops._registry import register_op
from ascendkit.ops._validate import FLOAT_DTYPES, check_rows_viewable, check_same_device, check_shape, check_tensor
from ascendkit.ops.reference import quant as reference

INT8 = (torch.int8,)
FP32 = (torch.float32,)
INT32 = (torch.int32,)


def _check_numel(name: str, t: torch.Tensor, allowed: tuple[int, ...], what: str) -> None:
    if t.numel() not in allowed:
        raise ValueError(f"{name}: expected {what} ({' or '.join(map(str, sorted(set(allowed))))} elements), got shape {tuple(t.shape)}")


def _check_rows(out: torch.Tensor, input: torch.Tensor) -> int:
    check_tensor("input", input, dtypes=FLOAT_DTYPES, ndim=(2, 3))
    check_tensor("out", out, dtypes=INT8, ndim=(2, 3))
    check_shape("out", out, input.shape, "same as input")
    check_rows_viewable("input", input)
    check_rows_viewable("out", out)
    _check_nonempty_rows(input)
    return input.numel() // input.shape[-1]


def _check_nonempty_rows(input: torch.Tensor) -> None:
    if input.shape[-1] == 0:
        raise ValueError(f"input: last dim (the quantized row) must not be empty, got shape {tuple(input.shape)}")


def _validate_static(out: torch.Tensor, input: torch.Tensor, scale: torch.Tensor, azp: torch.Tensor | None) -> None:
    _check_rows(out, input)
    check_tensor("scale", scale, dtypes=FP32)
    _check_numel("scale", scale, (1,), "one per-tensor scale")
    if azp is not None:
        check_tensor("azp", azp, dtypes=INT32)
        _check_numel("azp", azp, (1,), "one per-tensor zero point")
    check_same_device(input=input, out=out, scale=scale, azp=azp)


def _validate_dynamic(out: torch.Tensor, input: torch.Tensor, scales: torch.Tensor, azp: torch.Tensor | None) -> None:
    rows = _check_rows(out, input)
    check_tensor("scales", scales, dtypes=FP32, contiguous=True)
    _check_numel("scales", scales, (rows,), "one scale per token")
    if azp is not None:
        check_tensor("azp", azp, dtypes=INT32, contiguous=True)
        _check_numel("azp", azp, (rows,), "one zero point per token")
    check_same_device(input=input, out=out, scales=scales, azp=azp)


def _check_scales(name: str, t: torch.Tensor, n: int, what: str) -> None:
    check_tensor(name, t, dtypes=FP32, contiguous=True)
    _check_numel(name, t, (1, n), f"a scalar or one scale per {what}")


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
    _check_nonempty_rows(input)
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
        _check_numel("input_scale", input_scale, (1,), "one static per-tensor scale")
    _check_bias(bias, n, input.dtype, "input")


def _w8a8_linear_fake(input: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor,
                      input_scale: torch.Tensor | None, bias: torch.Tensor | None) -> torch.Tensor:
    return input.new_empty((*input.shape[:-1], weight.shape[0]))


static_scaled_int8_quant_op = register_op(
    "static_scaled_int8_quant",
    "(Tensor! out, Tensor input, Tensor scale, Tensor? azp) -> ()",
    validate=_validate_static,
    reference=reference.static_scaled_int8_quant,
    triton="ascendkit.kernels.quant:static_scaled_int8_quant",
)

dynamic_scaled_int8_quant_op = register_op(
    "dynamic_scaled_int8_quant",
    "(Tensor! out, Tensor input, Tensor! scales, Tensor!? azp) -> ()",
    validate=_validate_dynamic,
    reference=reference.dynamic_scaled_int8_quant,
    triton="ascendkit.kernels.quant:dynamic_scaled_int8_quant",
)

scaled_mm_op = register_op(
    "scaled_mm",
    "(Tensor! out, Tensor a, Tensor b, Tensor a_scales, Tensor b_scales, Tensor? bias) -> ()",
    validate=_validate_scaled_mm,
    reference=reference.scaled_mm,
    triton="ascendkit.kernels.scaled_mm:scaled_mm",
)

w8a8_linear_op = register_op(
    "w8a8_linear",
    "(Tensor input, Tensor weight, Tensor weight_scale, Tensor? input_scale, Tensor? bias) -> Tensor",
    validate=_validate_w8a8_linear,
    reference=reference.w8a8_linear,
    triton="ascendkit.kernels.scaled_mm:w8a8_linear",
    fake=_w8a8_linear_fake,
)


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
