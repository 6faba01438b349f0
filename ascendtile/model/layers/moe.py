"""DeepSeek-V2 MoE: softmax router (greedy or group-limited top-k), routed experts as a plain
torch loop over the experts hit, plus always-on shared experts. While torch.compile traces, the
loop (data-dependent sizes) is one opaque op call that runs it (expert_dispatch.py).

Matches HF transformers 5's DeepseekV2Moe: router logits and softmax in fp32, top-k weights NOT
renormalised (V2 ignores norm_topk_prob), scaled by routed_scaling_factor.

Tensor parallelism (vLLM's default for MoE, no expert parallelism): every rank holds a slice of
every expert's intermediate rows (and of the shared experts'), the router whole. Each rank routes
the same tokens to the same experts, sums its experts' and shared experts' partial outputs, and
one all-reduce per layer completes them.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ascendtile.distributed import all_reduce
from ascendtile.model.layers.expert_dispatch import register_layer, routed_experts
from ascendtile.model.layers.mlp import GatedMLP


class Router(nn.Module):
    def __init__(self, hidden_size: int, num_experts: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(num_experts, hidden_size), requires_grad=False)


class MoE(nn.Module):
    def __init__(self, hidden_size: int, moe_intermediate_size: int, num_experts: int, top_k: int,
                 num_shared_experts: int, routed_scaling_factor: float, topk_method: str = "greedy",
                 n_group: int = 1, topk_group: int = 1) -> None:
        super().__init__()
        if topk_method not in ("greedy", "group_limited_greedy"):
            raise ValueError(f"topk_method: {topk_method!r} is not a DeepSeek-V2 routing method")
        self.top_k, self.scaling = top_k, routed_scaling_factor
        self.topk_method, self.n_group, self.topk_group = topk_method, n_group, topk_group
        self.gate = Router(hidden_size, num_experts)
        # Partial outputs (reduce_results=False): forward all-reduces their sum once.
        self.experts = nn.ModuleList([GatedMLP(hidden_size, moe_intermediate_size, size_field="moe_intermediate_size",
                                               reduce_results=False) for _ in range(num_experts)])
        self.shared_experts = (GatedMLP(hidden_size, moe_intermediate_size * num_shared_experts,
                                        size_field="moe_intermediate_size * n_shared_experts", reduce_results=False)
                               if num_shared_experts else None)
        self.dispatch_key = register_layer(self)

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)
        self.dispatch_key = register_layer(self)  # a copy (deepcopy, pickle) runs its own experts

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x [T, hidden] -> (weights [T, top_k] fp32, expert ids [T, top_k])."""
        scores = F.linear(x.float(), self.gate.weight.float()).softmax(dim=-1)
        if self.topk_method == "group_limited_greedy":
            tokens, experts = scores.shape
            grouped = scores.view(tokens, self.n_group, experts // self.n_group)
            best_groups = grouped.amax(dim=-1).topk(self.topk_group, dim=-1).indices
            keep = torch.zeros(tokens, self.n_group, dtype=torch.bool, device=x.device)
            keep.scatter_(1, best_groups, True)
            scores = grouped.masked_fill(~keep[..., None], 0.0).view(tokens, experts)
        weights, ids = scores.topk(self.top_k, dim=-1)
        return weights * self.scaling, ids

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [T, hidden] -> [T, hidden], the same on every rank."""
        weights, ids = self.route(x)
        if torch.compiler.is_compiling():
            out = routed_experts(x, weights, ids, self.dispatch_key)
        else:
            out = self.run_routed_experts(x, weights, ids)
        if self.shared_experts is not None:
            out = out + self.shared_experts(x)
        return all_reduce(out)

    def run_routed_experts(self, x: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """x [T, hidden], route()'s weights and ids -> [T, hidden]: each expert hit, on its tokens."""
        out = torch.zeros_like(x)
        for expert_id in ids.unique().tolist():
            token, slot = (ids == expert_id).nonzero(as_tuple=True)
            y = self.experts[expert_id](x[token]) * weights[token, slot, None]
            out.index_add_(0, token, y.to(x.dtype))
        return out
