"""Op: w4a16_linear (fp16/bf16/fp32 activations times group-wise 4-bit weights in the packed layout
of ops/reference/w4a16.py)."""
from __future__ import annotations

import torch

from ascendtile.ops._registry import register_op
from ascendtile.ops._validate import (
    FLOAT_DTYPES, FP32, check_nonempty_rows, check_rows_viewable, check_same_device, check_shape, check_tensor,
    check_vector,
)

# Group sizes are whole multiples of this: the kernels' K steps (32-128) then lie inside a group or
# hold whole groups, and every format we read uses 32 (GGUF Q4_0/Q4_1), 64, 128 or a whole row.
GROUP_QUANTUM = 32


def check_group_size(group_size: int, k: int, where: str = "input [..., K]") -> None:
    """A W4A16 group size: a positive multiple of GROUP_QUANTUM dividing the k inputs of `where`
    (the op's input, or a layer a loader names); a ValueError naming group_size otherwise."""
    if (isinstance(group_size, bool) or not isinstance(group_size, int) or group_size <= 0
            or group_size % GROUP_QUANTUM):
        raise ValueError(f"group_size: must be a positive multiple of {GROUP_QUANTUM}, got {group_size!r}")
    if k % group_size:
        raise ValueError(f"group_size: {group_size} does not divide the {k} inputs of {where}")


def _validate_w4a16_linear(input: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor,
                           group_size: int, bias: torch.Tensor | None) -> None:
    check_tensor("input", input, dtypes=FLOAT_DTYPES)
    if input.dim() < 1:
        raise ValueError(f"input: expected at least 1 dim [..., K], got shape {tuple(input.shape)}")
    check_rows_viewable("input", input)
    check_nonempty_rows("input", input)
    check_tensor("qweight", qweight, dtypes=(torch.uint8,), ndim=2, contiguous=True)
    check_same_device(input=input, qweight=qweight, scales=scales, mins=mins, bias=bias)
    k = input.shape[-1]
    if k % 2:
        raise ValueError(f"input: K={k} must be even (two 4-bit weights per byte)")
    n = qweight.shape[0]
    check_shape("qweight", qweight, (n, k // 2), f"[N, K/2] for input's K={k}")
    check_group_size(group_size, k)
    for name, t in (("scales", scales), ("mins", mins)):
        check_tensor(name, t, dtypes=FP32, ndim=2, contiguous=True)
        check_shape(name, t, (n, k // group_size), f"[N, K/group_size] for group_size {group_size}")
    if bias is not None:
        check_vector("bias", bias, n, FLOAT_DTYPES, "one per output column")
        if bias.dtype != input.dtype:
            raise TypeError(f"bias: dtype {bias.dtype} differs from input dtype {input.dtype}")


def _w4a16_linear_fake(input: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor,
                       group_size: int, bias: torch.Tensor | None) -> torch.Tensor:
    return input.new_empty((*input.shape[:-1], qweight.shape[0]))


W4A16_LINEAR_SCHEMA = "(Tensor input, Tensor qweight, Tensor scales, Tensor mins, int group_size, Tensor? bias) -> Tensor"
w4a16_linear_op = register_op("w4a16_linear", W4A16_LINEAR_SCHEMA, validate=_validate_w4a16_linear,
                              fake=_w4a16_linear_fake)


def w4a16_linear(input: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor,
                 group_size: int, bias: torch.Tensor | None = None) -> torch.Tensor:
    """W4A16 linear: input [..., K] (fp16/bf16/fp32, K even) times the 4-bit weight qweight uint8
    [N, K/2] (input k = 2j in the low nibble of byte j, k = 2j + 1 in the high one), dequantized
    as w[n, k] = q·scales[n, g] + mins[n, g] with g = k // group_size (scales, mins fp32
    [N, K/group_size]; group_size a multiple of 32 dividing K, K itself = per channel), plus
    bias [N] (input dtype). fp32 accumulation; returns [..., N] in input's dtype."""
    return w4a16_linear_op(input, qweight, scales, mins, group_size, bias)
