"""Attention over real layouts: paged_attention (decode, one query per sequence), flash_attention_varlen
(causal prefill) and unified_attention (chunked prefill beside decodes). Baseline for decode:
npu_fused_infer_attention_score over the same paged cache."""
from __future__ import annotations

import torch

from ascendkit.bench.cases import CACHE_BLOCK_SIZE, KernelCase, attention_layouts, bench_cases, element_size, torch_npu

DECODE = ((1, 4096), (32, 2048))  # (batch, context)
PREFILL = ((1, 2048), (4, 512))  # (sequences, tokens each)
# unified: (new tokens, context) per sequence: one prefill chunk next to decodes
MIXED = ((512, 1536),) + ((1, 2048),) * 31
QUICK_DECODE, QUICK_PREFILL, QUICK_MIXED = ((3, 37),), ((2, 19),), ((7, 30), (1, 41), (1, 17))


def _paged(batch_lens: list[int], kv_heads: int, head_dim: int, dtype: torch.dtype, device: torch.device):
    """Caches holding each sequence's keys in its own shuffled blocks, and the block table."""
    per_seq = [-(-n // CACHE_BLOCK_SIZE) for n in batch_lens]
    width = max(per_seq)
    shape = (sum(per_seq), CACHE_BLOCK_SIZE, kv_heads, head_dim)
    key_cache = torch.randn(shape, dtype=dtype, device=device)
    value_cache = torch.randn(shape, dtype=dtype, device=device)
    ids = torch.randperm(sum(per_seq), device=device).to(torch.int32)
    table = torch.full((len(batch_lens), width), -1, dtype=torch.int32, device=device)
    start = 0
    for row, count in enumerate(per_seq):
        table[row, :count] = ids[start:start + count]
        start += count
    return key_cache, value_cache, table


def _io_bytes(q_tokens: int, kv_tokens: int, heads: int, kv_heads: int, head_dim: int, dtype: torch.dtype) -> int:
    # read queries, every visible key and value once, write outputs
    return (2 * q_tokens * heads + 2 * kv_tokens * kv_heads) * head_dim * element_size(dtype)


def _decode(batch: int, context: int, layout: tuple[int, int, int], dtype: torch.dtype) -> KernelCase:
    heads, kv_heads, head_dim = layout
    scale = head_dim ** -0.5

    def inputs(device):
        key_cache, value_cache, table = _paged([context] * batch, kv_heads, head_dim, dtype, device)
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
        "attention", "paged_attention", {"batch": batch, "context": context, "heads": heads, "kv_heads": kv_heads,
                                         "head_dim": head_dim}, dtype,
        bytes_moved=_io_bytes(batch, batch * context, heads, kv_heads, head_dim, dtype),
        flops=4 * batch * heads * context * head_dim,  # QK^T and PV
        setup=setup, baseline=baseline, baseline_name="npu_fused_infer_attention_score",
    )


def _causal_pairs(q_len: int, kv_len: int) -> int:
    """(query, key) pairs a bottom-right aligned causal mask lets through."""
    return q_len * kv_len - q_len * (q_len - 1) // 2


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
        "attention", "flash_attention_varlen", {"seqs": seqs, "length": length, "heads": heads, "kv_heads": kv_heads,
                                                "head_dim": head_dim}, dtype,
        bytes_moved=_io_bytes(tokens, tokens, heads, kv_heads, head_dim, dtype),
        flops=4 * heads * head_dim * seqs * _causal_pairs(length, length),
        setup=setup,
    )


def _unified(mixed: tuple[tuple[int, int], ...], layout: tuple[int, int, int], dtype: torch.dtype) -> KernelCase:
    heads, kv_heads, head_dim = layout
    q_lens, kv_lens = [q for q, _ in mixed], [k for _, k in mixed]
    tokens = sum(q_lens)

    def setup(device):
        key_cache, value_cache, table = _paged(kv_lens, kv_heads, head_dim, dtype, device)
        query = torch.randn(tokens, heads, head_dim, dtype=dtype, device=device)
        cu = torch.tensor([0] + q_lens, device=device).cumsum(0).to(torch.int32)
        seqused = torch.tensor(kv_lens, dtype=torch.int32, device=device)
        out = torch.empty_like(query)
        return lambda: torch.ops.ascend.unified_attention(out, query, key_cache, value_cache, table, cu, seqused,
                                                          max(q_lens), max(kv_lens), head_dim ** -0.5, 0.0, 0)

    return KernelCase(
        "attention", "unified_attention", {"seqs": len(mixed), "new_tokens": tokens, "kv_tokens": sum(kv_lens),
                                           "heads": heads, "kv_heads": kv_heads, "head_dim": head_dim}, dtype,
        bytes_moved=_io_bytes(tokens, sum(kv_lens), heads, kv_heads, head_dim, dtype),
        flops=4 * heads * head_dim * sum(_causal_pairs(q, k) for q, k in mixed),
        setup=setup,
    )


@bench_cases("attention")
def _cases(dtype: torch.dtype, quick: bool) -> list[KernelCase]:
    layouts = attention_layouts(quick).values()
    decode, prefill, mixed = (QUICK_DECODE, QUICK_PREFILL, QUICK_MIXED) if quick else (DECODE, PREFILL, MIXED)
    return ([_decode(b, c, layout, dtype) for layout in layouts for b, c in decode]
            + [_prefill(s, n, layout, dtype) for layout in layouts for s, n in prefill]
            + [_unified(mixed, layout, dtype) for layout in layouts])
