"""RMSNorm module on torch.ops.ascend.rms_norm / fused_add_rms_norm."""
from __future__ import annotations

import torch
from torch import nn

import ascendkit.ops as ak


class RMSNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(hidden_size), requires_grad=False)
        self.eps = eps

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        """x [..., hidden] -> normed x; with residual: (normed(x + residual), x + residual), both
        updated in place (vLLM's fused residual convention)."""
        if residual is None:
            return ak.rms_norm(x, self.weight, self.eps)
        return ak.fused_add_rms_norm(x, residual, self.weight, self.eps)
