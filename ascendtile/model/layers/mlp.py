"""Gated MLP: down(act(gate(x)) * up(x)) with gate/up merged into one matmul; act is SiLU
(SwiGLU, Llama family) or tanh-approximated GELU (GeGLU, Gemma). Under tensor parallelism each
rank holds a range of the intermediate rows (gate_up column-parallel, down row-parallel; MoE
experts skip down's all-reduce and reduce their sum once)."""
from __future__ import annotations

import torch
from torch import nn

import ascendtile.ops as ak
from ascendtile.distributed import tp_rank, tp_size
from ascendtile.model.layers.parallel_linear import ColumnParallelLinear, RowParallelLinear
from ascendtile.model.layers.partition import split_evenly

# HF config spelling of the MLP activation -> the ascendtile gated-activation op prefix.
ACTIVATIONS = {"silu": "silu", "gelu_pytorch_tanh": "gelu_tanh"}


class GatedMLP(nn.Module):
    def __init__(self, hidden_size: int, intermediate_size: int, bias: bool = False, hidden_act: str = "silu",
                 size_field: str = "intermediate_size", reduce_results: bool = True) -> None:
        """hidden_act: HF spelling, a key of ACTIVATIONS ("silu", "gelu_pytorch_tanh"). size_field:
        the config field intermediate_size came from, named when it does not split over the ranks.
        reduce_results=False: forward returns this rank's partial sum (see RowParallelLinear)."""
        super().__init__()
        self.act_and_mul = getattr(ak, f"{ACTIVATIONS[hidden_act]}_and_mul")
        rows = split_evenly(intermediate_size, size_field, tp_size(), tp_rank())
        self.gate_up_proj = ColumnParallelLinear(hidden_size, [rows, rows], bias=bias,
                                                 shard_names=["gate_proj", "up_proj"])
        self.down_proj = RowParallelLinear(rows, hidden_size, bias=bias, reduce_results=reduce_results)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [T, hidden] -> [T, hidden]. The activation op runs unvalidated: its input is this
        module's own projection."""
        return self.down_proj(self.act_and_mul(self.gate_up_proj(x), validate=False))
