"""Ops: silu_and_mul, gelu_tanh_and_mul, gelu_and_mul (vLLM argument order: out first)."""
from __future__ import annotations

import torch

from ascendtile.ops._registry import register_op, unchecked
from ascendtile.ops._validate import FLOAT_DTYPES, check_rows_viewable, check_same_device, check_same_dtype, check_shape, check_tensor


def _validate(out: torch.Tensor, input: torch.Tensor) -> None:
    check_tensor("input", input, dtypes=FLOAT_DTYPES, ndim=(2, 3))
    check_tensor("out", out, dtypes=FLOAT_DTYPES, ndim=(2, 3))
    check_same_device(input=input, out=out)
    check_same_dtype(input=input, out=out)
    if input.shape[-1] % 2:
        raise ValueError(f"input: last dim must be even (gate and up halves), got {input.shape[-1]}")
    check_shape("out", out, (*input.shape[:-1], input.shape[-1] // 2), "input's shape with the last dim halved")
    check_rows_viewable("input", input)
    check_rows_viewable("out", out)


silu_and_mul_op = register_op("silu_and_mul", "(Tensor! out, Tensor input) -> ()", validate=_validate)
gelu_tanh_and_mul_op = register_op("gelu_tanh_and_mul", "(Tensor! out, Tensor input) -> ()", validate=_validate)
gelu_and_mul_op = register_op("gelu_and_mul", "(Tensor! out, Tensor input) -> ()", validate=_validate)
_UNCHECKED = {silu_and_mul_op: unchecked("silu_and_mul"), gelu_tanh_and_mul_op: unchecked("gelu_tanh_and_mul"),
              gelu_and_mul_op: unchecked("gelu_and_mul")}


def _gated(op, input: torch.Tensor, validate: bool) -> torch.Tensor:
    out = torch.empty((*input.shape[:-1], input.shape[-1] // 2), dtype=input.dtype, device=input.device)
    (op if validate else _UNCHECKED[op])(out, input)
    return out


def silu_and_mul(input: torch.Tensor, *, validate: bool = True) -> torch.Tensor:
    """input [..., 2d] (fp16/bf16/fp32) -> silu(input[..., :d]) * input[..., d:], shape [..., d].
    validate=False: no argument checks (`_registry.unchecked`: for callers valid by construction)."""
    return _gated(silu_and_mul_op, input, validate)


def gelu_tanh_and_mul(input: torch.Tensor, *, validate: bool = True) -> torch.Tensor:
    """input [..., 2d] (fp16/bf16/fp32) -> gelu_tanh(input[..., :d]) * input[..., d:], shape [..., d];
    gelu_tanh is torch's F.gelu(approximate="tanh") (HF "gelu_pytorch_tanh", Gemma's MLP).
    validate=False: no argument checks (`_registry.unchecked`: for callers valid by construction)."""
    return _gated(gelu_tanh_and_mul_op, input, validate)


def gelu_and_mul(input: torch.Tensor, *, validate: bool = True) -> torch.Tensor:
    """input [..., 2d] (fp16/bf16/fp32) -> gelu(input[..., :d]) * input[..., d:], shape [..., d];
    gelu is the exact erf form 0.5·x·(1 + erf(x/√2)), torch's F.gelu(approximate="none") (HF
    "gelu", vLLM's GeluAndMul default).
    validate=False: no argument checks (`_registry.unchecked`: for callers valid by construction)."""
    return _gated(gelu_and_mul_op, input, validate)
