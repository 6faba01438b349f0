"""Reference: silu_and_mul, gelu_tanh_and_mul, gelu_and_mul (act(gate) * up, computed in fp32)."""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F


def _gated(out: torch.Tensor, input: torch.Tensor, act: Callable[[torch.Tensor], torch.Tensor]) -> None:
    d = input.shape[-1] // 2
    gate, up = input[..., :d], input[..., d:]
    if input.dtype == out.dtype == torch.float32:
        # the CPU production path: straight into out, no casts, no product temporary, no copy
        torch.mul(act(gate), up, out=out)
    else:
        out.copy_(act(gate.float()) * up.float())


def silu_and_mul(out: torch.Tensor, input: torch.Tensor) -> None:
    _gated(out, input, F.silu)


def gelu_tanh_and_mul(out: torch.Tensor, input: torch.Tensor) -> None:
    _gated(out, input, lambda x: F.gelu(x, approximate="tanh"))


def gelu_and_mul(out: torch.Tensor, input: torch.Tensor) -> None:
    _gated(out, input, F.gelu)
