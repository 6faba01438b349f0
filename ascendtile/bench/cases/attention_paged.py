"""paged_attention (decode, one query per sequence) over real layouts; baseline
npu_fused_infer_attention_score over the same paged cache. Each shape also over an int8 cache
with dynamic scales (kv_int8=1 in the name: about half the bytes per context token)."""
from __future__ import annotations

import torch

from ascendtile.bench.cases import CACHE_BLOCK_SIZE, KernelCase, attention_layouts, bench_cases, torch_npu
from ascendtile.bench.cases._attention import io_bytes, paged, paged_int8

DECODE = ((1, 4096), (32, 2048))  # (batch, context)
QUICK_DECODE = ((3, 37),)


def _decode(batch: int, context: int, layout: tuple[int, int, int], dtype: torch.dtype) -> KernelCase:
    heads, kv_heads, head_dim = layout
    scale = head_dim ** -0.5

    def inputs(device):
        key_cache, value_cache, table = paged([context] * batch, kv_heads, head_dim, dtype, device)
        query = torch.randn(batch, heads, head_dim, dtype=dtype, device=device)
        return query, key_cache, value_cache, table, torch.full((batch,), context, dtype=torch.int32, device=device)

    def setup(device):
        query, key_cache, value_cache, table, seq_lens = inputs(device)
        out = torch.empty_like(query)
        return lambda: torch.ops.ascend.paged_attention(out, query, key_cache, value_cache, table, seq_lens, scale, 0.0, 0)

    def baseline(device):
        query, key_cache, value_cache, table, seq_lens = inputs(device)
        blocks = key_cache.shape[0]
        q = query.view(batch, 1, heads * head_dim)  # BSH layout, one new token per sequence
        k, v = key_cache.view(blocks, CACHE_BLOCK_SIZE, -1), value_cache.view(blocks, CACHE_BLOCK_SIZE, -1)
        lens = seq_lens.tolist()
        return lambda: torch_npu().npu_fused_infer_attention_score(
            q, k, v, num_heads=heads, num_key_value_heads=kv_heads, input_layout="BSH", scale=scale,
            block_table=table, block_size=CACHE_BLOCK_SIZE, actual_seq_lengths_kv=lens)

    return KernelCase(
        "attention_paged", "paged_attention", {"batch": batch, "context": context, "heads": heads,
                                               "kv_heads": kv_heads, "head_dim": head_dim}, dtype,
        bytes_moved=io_bytes(batch, batch * context, heads, kv_heads, head_dim, dtype),
        flops=4 * batch * heads * context * head_dim,  # QK^T and PV
        setup=setup, baseline=baseline, baseline_name="npu_fused_infer_attention_score",
    )


def _decode_int8(batch: int, context: int, layout: tuple[int, int, int], dtype: torch.dtype) -> KernelCase:
    heads, kv_heads, head_dim = layout

    def setup(device):
        key_cache, value_cache, table, k_scale, v_scale = paged_int8([context] * batch, kv_heads, head_dim, device)
        query = torch.randn(batch, heads, head_dim, dtype=dtype, device=device)
        seq_lens = torch.full((batch,), context, dtype=torch.int32, device=device)
        out = torch.empty_like(query)
        return lambda: torch.ops.ascend.paged_attention(out, query, key_cache, value_cache, table, seq_lens,
                                                        head_dim ** -0.5, 0.0, 0, "int8", k_scale, v_scale)

    return KernelCase(
        "attention_paged", "paged_attention", {"batch": batch, "context": context, "heads": heads,
                                               "kv_heads": kv_heads, "head_dim": head_dim, "kv_int8": 1}, dtype,
        bytes_moved=io_bytes(batch, batch * context, heads, kv_heads, head_dim, dtype, kv_int8=True),
        flops=4 * batch * heads * context * head_dim, setup=setup,
    )


@bench_cases("attention_paged")
def _cases(dtype: torch.dtype, quick: bool) -> list[KernelCase]:
    return [make(b, c, layout, dtype) for layout in attention_layouts(quick).values()
            for b, c in (QUICK_DECODE if quick else DECODE) for make in (_decode, _decode_int8)]
