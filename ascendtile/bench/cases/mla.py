"""mla_attention decode: one query token per sequence over the paged latent cache, DeepSeek-V2-Lite
(16 heads) and DeepSeek-V2 (128 heads) at several batch sizes and context lengths."""
from __future__ import annotations

import torch

from ascendtile.bench.cases import CACHE_BLOCK_SIZE, KernelCase, bench_cases, element_size

KV_LORA_RANK, ROPE_DIM = 512, 64
# (heads, batch, context length)
SHAPES = ((16, 1, 4096), (16, 32, 2048), (128, 32, 2048))
QUICK_SHAPES = ((16, 3, 37),)


def _decode(heads: int, batch: int, context: int, dtype: torch.dtype) -> KernelCase:
    width = KV_LORA_RANK + ROPE_DIM
    blocks_per_seq = -(-context // CACHE_BLOCK_SIZE)

    def setup(device):
        query = torch.randn(batch, heads, width, dtype=dtype, device=device)
        kv_cache = torch.randn(batch * blocks_per_seq, CACHE_BLOCK_SIZE, width, dtype=dtype, device=device)
        # Each sequence owns a shuffled set of blocks, as a block manager hands them out.
        block_table = torch.randperm(batch * blocks_per_seq, device=device).to(torch.int32).view(batch, blocks_per_seq)
        cu_seqlens_q = torch.arange(batch + 1, dtype=torch.int32, device=device)
        seqused_k = torch.full((batch,), context, dtype=torch.int32, device=device)
        out = torch.empty(batch, heads, KV_LORA_RANK, dtype=dtype, device=device)
        scale = width ** -0.5
        return lambda: torch.ops.ascend.mla_attention(out, query, kv_cache, block_table, cu_seqlens_q, seqused_k,
                                                      1, context, KV_LORA_RANK, scale)

    size = element_size(dtype)
    return KernelCase(
        "mla", "mla_attention", {"heads": heads, "batch": batch, "context": context}, dtype,
        # read the queries and every sequence's latent rows once, write the outputs
        bytes_moved=batch * (heads * width + context * width + heads * KV_LORA_RANK) * size,
        flops=2 * batch * heads * context * (width + KV_LORA_RANK),  # scores (QK^T) and PV
        setup=setup,
    )


@bench_cases("mla")
def _cases(dtype: torch.dtype, quick: bool) -> list[KernelCase]:
    return [_decode(*shape, dtype) for shape in (QUICK_SHAPES if quick else SHAPES)]
