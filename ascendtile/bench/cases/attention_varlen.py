"""flash_attention_varlen (causal prefill over dense varlen q/k/v) over real layouts."""
from __future__ import annotations

import torch

from ascendtile.bench.cases import KernelCase, attention_layouts, bench_cases
from ascendtile.bench.cases._attention import causal_pairs, io_bytes

PREFILL = ((1, 2048), (4, 512))  # (sequences, tokens each)
QUICK_PREFILL = ((2, 19),)


def _prefill(seqs: int, length: int, layout: tuple[int, int, int], dtype: torch.dtype) -> KernelCase:
    heads, kv_heads, head_dim = layout
    tokens = seqs * length

    def setup(device):
        q = torch.randn(tokens, heads, head_dim, dtype=dtype, device=device)
        k = torch.randn(tokens, kv_heads, head_dim, dtype=dtype, device=device)
        v = torch.randn_like(k)
        cu = torch.arange(0, tokens + 1, length, dtype=torch.int32, device=device)
        out = torch.empty_like(q)
        return lambda: torch.ops.ascend.flash_attention_varlen(out, q, k, v, cu, cu, length, length, head_dim ** -0.5, True)

    return KernelCase(
        "attention_varlen", "flash_attention_varlen", {"seqs": seqs, "length": length, "heads": heads,
                                                       "kv_heads": kv_heads, "head_dim": head_dim}, dtype,
        bytes_moved=io_bytes(tokens, tokens, heads, kv_heads, head_dim, dtype),
        flops=4 * heads * head_dim * seqs * causal_pairs(length, length),
        setup=setup,
    )


@bench_cases("attention_varlen")
def _cases(dtype: torch.dtype, quick: bool) -> list[KernelCase]:
    return [_prefill(s, n, layout, dtype) for layout in attention_layouts(quick).values()
            for s, n in (QUICK_PREFILL if quick else PREFILL)]
