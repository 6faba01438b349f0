"""RMSNorm module on torch.ops.ascend.rms_norm / fused_add_rms_norm.

Gemma checkpoints store the norm weight as w with the norm scaling by (1 + w). The module keeps
(1 + w) as its weight, so forward is the plain op: the weight loader adds `checkpoint_offset`
(an attribute of the weight) as it copies, and save_w8a8 subtracts it again."""
from __future__ import annotations

import torch
from torch import nn

import ascendtile.ops as ak


class RMSNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float = 1e-6, checkpoint_offset: float = 0.0) -> None:
        """checkpoint_offset: stored weight = checkpoint weight + offset (1.0 for Gemma)."""
        super().__init__()
        self.weight = nn.Parameter(torch.empty(hidden_size), requires_grad=False)
        self.weight.checkpoint_offset = checkpoint_offset
        self.eps = eps

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        """x [..., hidden] -> normed x; with residual: (normed(x + residual), x + residual), both
        updated in place (vLLM's fused residual convention). The ops run unvalidated: x and
        residual are the model's own activations, shaped by its layers (the hot loop's ~60 norm
        calls per step skip their checks; the registered ops still check direct callers)."""
        if residual is None:
            return ak.rms_norm(x, self.weight, self.eps, validate=False)
        return ak.fused_add_rms_norm(x, residual, self.weight, self.eps, validate=False)
