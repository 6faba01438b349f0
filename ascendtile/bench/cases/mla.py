"""mla_attention decode: one query token per sequence over the paged latent cache, DeepSeek-V2-Lite
(16 heads) and DeepSeek-V2 (128 heads) at several batch sizes and context lengths; each over a
float cache and an int8 cache with dynamic scales (kv_int8=1: one byte per latent value plus two
fp32 scales per token)."""
from __future__ import annotations

import torch

from ascendtile.bench.cases import CACHE_BLOCK_SIZE, KernelCase, bench_cases, element_size

KV_LORA_RANK, ROPE_DIM = 512, 64
# (heads, batch, context length)
SHAPES = ((16, 1, 4096), (16, 32, 2048), (128, 32, 2048))
QUICK_SHAPES = ((16, 3, 37),)


SCALE_PARTS, SCALE_BYTES = 2, 4  # an int8 cache's fp32 scales per token: the latent, the rope part


def _decode(heads: int, batch: int, context: int, dtype: torch.dtype, kv_int8: bool) -> KernelCase:
    width = KV_LORA_RANK + ROPE_DIM
    blocks_per_seq = -(-context // CACHE_BLOCK_SIZE)
    blocks = batch * blocks_per_seq

    def setup(device):
        query = torch.randn(batch, heads, width, dtype=dtype, device=device)
        if kv_int8:
            kv_cache = torch.randint(-127, 128, (blocks, CACHE_BLOCK_SIZE, width), dtype=torch.int8, device=device)
            quant = ("int8", torch.rand(blocks, SCALE_PARTS, CACHE_BLOCK_SIZE, device=device) / 64)
        else:
            kv_cache = torch.randn(blocks, CACHE_BLOCK_SIZE, width, dtype=dtype, device=device)
            quant = ()
        # Each sequence owns a shuffled set of blocks, as a block manager hands them out.
        block_table = torch.randperm(batch * blocks_per_seq, device=device).to(torch.int32).view(batch, blocks_per_seq)
        cu_seqlens_q = torch.arange(batch + 1, dtype=torch.int32, device=device)
        seqused_k = torch.full((batch,), context, dtype=torch.int32, device=device)
        out = torch.empty(batch, heads, KV_LORA_RANK, dtype=dtype, device=device)
        scale = width ** -0.5
        return lambda: torch.ops.ascend.mla_attention(out, query, kv_cache, block_table, cu_seqlens_q, seqused_k,
                                                      1, context, KV_LORA_RANK, scale, *quant)

    size = element_size(dtype)
    row_bytes = width + SCALE_PARTS * SCALE_BYTES if kv_int8 else width * size
    shape = {"heads": heads, "batch": batch, "context": context}
    return KernelCase(
        "mla", "mla_attention", {**shape, "kv_int8": 1} if kv_int8 else shape, dtype,
        # read the queries and every sequence's latent rows once, write the outputs
        bytes_moved=batch * ((heads * width + heads * KV_LORA_RANK) * size + context * row_bytes),
        flops=2 * batch * heads * context * (width + KV_LORA_RANK),  # scores (QK^T) and PV
        setup=setup,
    )


@bench_cases("mla")
def _cases(dtype: torch.dtype, quick: bool) -> list[KernelCase]:
    return [_decode(*shape, dtype, kv_int8) for shape in (QUICK_SHAPES if quick else SHAPES) for kv_int8 in (False, True)]
