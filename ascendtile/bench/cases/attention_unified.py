"""unified_attention (a chunked prefill beside decodes over the paged cache) over real layouts,
over a float cache and an int8 cache with dynamic scales (kv_int8=1 in the name)."""
from __future__ import annotations

import torch

from ascendtile.bench.cases import KernelCase, attention_layouts, bench_cases
from ascendtile.bench.cases._attention import causal_pairs, io_bytes, paged, paged_int8

# (new tokens, context) per sequence: one prefill chunk next to decodes
MIXED = ((512, 1536),) + ((1, 2048),) * 31
QUICK_MIXED = ((7, 30), (1, 41), (1, 17))


def _unified(mixed: tuple[tuple[int, int], ...], layout: tuple[int, int, int], dtype: torch.dtype,
             kv_int8: bool) -> KernelCase:
    heads, kv_heads, head_dim = layout
    q_lens, kv_lens = [q for q, _ in mixed], [k for _, k in mixed]
    tokens = sum(q_lens)

    def setup(device):
        if kv_int8:
            key_cache, value_cache, table, *scales = paged_int8(kv_lens, kv_heads, head_dim, device)
            quant = ("int8", *scales)
        else:
            key_cache, value_cache, table = paged(kv_lens, kv_heads, head_dim, dtype, device)
            quant = ()
        query = torch.randn(tokens, heads, head_dim, dtype=dtype, device=device)
        cu = torch.tensor([0] + q_lens, device=device).cumsum(0).to(torch.int32)
        seqused = torch.tensor(kv_lens, dtype=torch.int32, device=device)
        out = torch.empty_like(query)
        return lambda: torch.ops.ascend.unified_attention(out, query, key_cache, value_cache, table, cu, seqused,
                                                          max(q_lens), max(kv_lens), head_dim ** -0.5, 0.0, 0, *quant)

    shape = {"seqs": len(mixed), "new_tokens": tokens, "kv_tokens": sum(kv_lens), "heads": heads,
             "kv_heads": kv_heads, "head_dim": head_dim}
    return KernelCase(
        "attention_unified", "unified_attention", {**shape, "kv_int8": 1} if kv_int8 else shape, dtype,
        bytes_moved=io_bytes(tokens, sum(kv_lens), heads, kv_heads, head_dim, dtype, kv_int8),
        flops=4 * heads * head_dim * sum(causal_pairs(q, k) for q, k in mixed),
        setup=setup,
    )


@bench_cases("attention_unified")
def _cases(dtype: torch.dtype, quick: bool) -> list[KernelCase]:
    return [_unified(QUICK_MIXED if quick else MIXED, layout, dtype, kv_int8)
            for layout in attention_layouts(quick).values() for kv_int8 in (False, True)]
