"""reshape_and_cache_flash vs vLLM's CPU cache writer (torch.ops._C.cpu_attn_reshape_and_cache, "vec"
ISA), same keys, values and slot mapping (-1 padding slots included, key/value as strided head
slices of one fused qkv), on both of our paths. The caches must be bit-identical once ours is put in
vLLM's layout (_cache_layout): a store is a copy. vLLM's writer takes per-tensor float scales and
int64 slots; its "amx" ISA packs keys differently (not compared)."""
import copy

import pytest
import torch

from vs_vllm._cache_layout import ISA, to_vllm_cpu_caches
from vs_vllm._compare import DTYPES, PATHS, dtype_id, on_path

BLOCKS, BLOCK_SIZE, HEADS, KV_HEADS, HEAD_SIZE = 5, 32, 4, 2, 64


@pytest.mark.parametrize("fused", [False, True], ids=["separate", "fused_qkv"])
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_reshape_and_cache_flash(vllm_ops, dtype, path, fused):
    tokens = 41
    if fused:  # key and value: head slices of one [T, H + 2 KV, D] projection
        qkv = torch.randn(tokens, HEADS + 2 * KV_HEADS, HEAD_SIZE, dtype=dtype)
        key, value = qkv[:, HEADS:HEADS + KV_HEADS], qkv[:, HEADS + KV_HEADS:]
    else:
        key, value = (torch.randn(tokens, KV_HEADS, HEAD_SIZE, dtype=dtype) for _ in range(2))
    slots = torch.randperm(BLOCKS * BLOCK_SIZE)[:tokens]
    slots[[0, 7, 30]] = -1  # padding tokens: written nowhere
    # Both start from the same NaN-free garbage, so untouched slots compare too.
    key_cache, value_cache = (torch.randn(BLOCKS, BLOCK_SIZE, KV_HEADS, HEAD_SIZE, dtype=dtype) for _ in range(2))
    their_k, their_v = to_vllm_cpu_caches(key_cache, value_cache)
    their_key, their_value = copy.deepcopy([key, value])
    vllm_ops.cpu_attn_reshape_and_cache(their_key, their_value, their_k, their_v, slots, ISA)
    unit = torch.ones(1)
    ours = on_path(path, torch.ops.ascend.reshape_and_cache_flash,
                   [key, value, key_cache, value_cache, slots, "auto", unit, unit])
    our_k, our_v = to_vllm_cpu_caches(ours[2], ours[3])
    assert torch.equal(our_k, their_k) and torch.equal(our_v, their_v)
    assert not torch.equal(ours[2], key_cache), "some slots should have been written"
