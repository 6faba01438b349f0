"""Linear: an nn.Linear-layout projection that may be W8A8 and may merge several checkpoint
projections (q/k/v, gate/up) into one matmul.

Float: weight [N, K] in the model dtype, y = x·Wᵀ + b (plain torch matmul).
W8A8:  weight int8 [N, K], weight_scale fp32 [N] (per output channel), input_scale fp32 [1]
       (static) or None (dynamic per-token); y = ascendkit.ops.w8a8_linear(...).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import ascendkit.ops as ak


class Linear(nn.Module):
    def __init__(self, in_features: int, out_features: int | list[int], bias: bool = False,
                 shard_names: list[str] | None = None) -> None:
        """out_features as a list with shard_names merges checkpoint tensors `<shard>.weight` etc.
        stacked along the output dim (e.g. [q, k, v] sizes with ["q_proj", "k_proj", "v_proj"])."""
        super().__init__()
        sizes = out_features if isinstance(out_features, list) else [out_features]
        self.in_features, self.out_features = in_features, sum(sizes)
        self.shard_names = shard_names or []
        self.shard_sizes = sizes
        self.weight = nn.Parameter(torch.empty(self.out_features, in_features), requires_grad=False)
        self.bias = nn.Parameter(torch.empty(self.out_features), requires_grad=False) if bias else None
        self.register_parameter("weight_scale", None)  # set by to_w8a8_shell
        self.register_parameter("input_scale", None)

    @property
    def quantized(self) -> bool:
        return self.weight.dtype == torch.int8

    def shard_offsets(self) -> dict[str, tuple[int, int]]:
        """shard name -> (row offset, rows) in the merged weight."""
        offsets, start = {}, 0
        for name, size in zip(self.shard_names, self.shard_sizes):
            offsets[name] = (start, size)
            start += size
        return offsets

    def to_w8a8_shell(self, static: bool) -> None:
        """Replace the float weight by uninitialised int8 weight + scales (filled by a loader)."""
        device = self.weight.device
        self.weight = nn.Parameter(torch.empty(self.out_features, self.in_features, dtype=torch.int8, device=device),
                                   requires_grad=False)
        self.weight_scale = nn.Parameter(torch.empty(self.out_features, dtype=torch.float32, device=device),
                                          requires_grad=False)
        self.input_scale = nn.Parameter(torch.zeros(1, dtype=torch.float32, device=device), requires_grad=False) if static else None

    def dequantized_weight(self, dtype: torch.dtype) -> torch.Tensor:
        if not self.quantized:
            return self.weight.to(dtype)
        return (self.weight.float() * self.weight_scale[:, None]).to(dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.quantized:
            return ak.w8a8_linear(x, self.weight, self.weight_scale, self.input_scale, self.bias)
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        kind = "w8a8-" + ("static" if self.input_scale is not None else "dynamic") if self.quantized else "float"
        return f"in={self.in_features}, out={self.shard_sizes}, bias={self.bias is not None}, {kind}"
