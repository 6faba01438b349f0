"""Reference: silu_and_mul."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def silu_and_mul(out: torch.Tensor, input: torch.Tensor) -> None:
    d = input.shape[-1] // 2
    gate, up = input[..., :d].float(), input[..., d:].float()
    if out.dtype == torch.float32:  # write straight into out: no product temporary, no copy
        torch.mul(F.silu(gate), up, out=out)
    else:
        out.copy_(F.silu(gate) * up)
