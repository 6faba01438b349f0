"""rotary_embedding (neox) on query and key over real attention layouts x token counts;
baseline npu_rotary_mul on the same query and key with cos/sin already gathered by position."""
from __future__ import annotations

import torch

from ascendtile.bench.cases import KernelCase, attention_layouts, bench_cases, element_size, token_counts, torch_npu

MAX_POSITION = 4096


def _rotary(model: str, tokens: int, layout: tuple[int, int, int], dtype: torch.dtype) -> KernelCase:
    q_heads, kv_heads, head_dim = layout

    def inputs(device):
        positions = torch.randint(0, MAX_POSITION, (tokens,), device=device)
        query = torch.randn(tokens, q_heads, head_dim, dtype=dtype, device=device)
        key = torch.randn(tokens, kv_heads, head_dim, dtype=dtype, device=device)
        cache = torch.randn(MAX_POSITION, head_dim, dtype=dtype, device=device)  # [cos | sin]
        return positions, query, key, cache

    def setup(device):
        positions, query, key, cache = inputs(device)
        return lambda: torch.ops.ascend.rotary_embedding(positions, query, key, head_dim, cache, True)

    def baseline(device):
        positions, query, key, cache = inputs(device)
        cos, sin = cache[positions].chunk(2, dim=-1)
        cos = torch.cat((cos, cos), -1).view(1, tokens, 1, head_dim)  # npu_rotary_mul wants full-width cos/sin
        sin = torch.cat((sin, sin), -1).view(1, tokens, 1, head_dim)
        q, k = query.view(1, tokens, q_heads, head_dim), key.view(1, tokens, kv_heads, head_dim)
        npu = torch_npu()
        return lambda: (npu.npu_rotary_mul(q, cos, sin), npu.npu_rotary_mul(k, cos, sin))

    elements = tokens * (q_heads + kv_heads) * head_dim
    return KernelCase(
        "rope", "rotary_embedding", {"tokens": tokens, "heads": q_heads, "kv_heads": kv_heads, "head_dim": head_dim}, dtype,
        # read and write query and key, read one cache row per token, read the positions
        bytes_moved=2 * elements * element_size(dtype) + tokens * head_dim * element_size(dtype) + tokens * 8,
        flops=3 * elements,  # x*cos -/+ x_rot*sin
        setup=setup, baseline=baseline, baseline_name="npu_rotary_mul",
    )


@bench_cases("rope")
def _cases(dtype: torch.dtype, quick: bool) -> list[KernelCase]:
    return [_rotary(m, t, layout, dtype) for m, layout in attention_layouts(quick).items() for t in token_counts(quick)]
