"""Our paged KV cache in vLLM's CPU layout (its "vec" ISA, the x86 path without AMX).

Ours (vLLM's flash layout): key_cache and value_cache [num_blocks, block_size, num_kv_heads,
head_size]. vLLM's CPU attention: both allocated [num_blocks, num_kv_heads, block_size, head_size];
values are stored so, keys transposed within each (block, head): the block_size x head_size tile
is held as head_size x block_size (key element (offset, d) at d·block_size + offset), the layout
its QK^T loop reads. tests/vs_vllm/test_kv_cache.py checks this mapping against vLLM's own writer
(cpu_attn_reshape_and_cache) bit for bit; the attention test feeds it to vLLM's attention."""
from __future__ import annotations

import torch

ISA = "vec"


def to_vllm_cpu_caches(key_cache: torch.Tensor, value_cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Our [num_blocks, block_size, num_kv_heads, head_size] caches -> vLLM CPU's (new tensors)."""
    blocks, block_size, heads, head_size = key_cache.shape
    keys = key_cache.permute(0, 2, 3, 1).contiguous().view(blocks, heads, block_size, head_size)
    return keys, value_cache.transpose(1, 2).contiguous()
