"""LLM constructor options on a tiny random Llama (2 layers, 2 KV heads of 16): kv_cache_memory
sizes the cache in bytes; quantization="w8a8" runs the int8-weight model, token for token what
the paged-cache driver gets from load_model(..., quantization="w8a8"); quantization="w4a16"
likewise, in bf16 unless a dtype is given."""
from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig

from ascendtile.model import load_model
from ascendtile.runtime import LLM, SamplingParams
from model.helpers import PagedDriver, save_tiny

BYTES_PER_BLOCK = 2 * 2 * 16 * 2 * 16 * 4  # layers · (K, V) · 16 tokens · 2 KV heads · head_dim 16 · fp32
PROMPT = [5, 9, 100, 7, 2, 33, 61]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny")
    save_tiny(LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, initializer_range=0.1,
                          max_position_embeddings=256), path)
    return str(path)


def test_kv_cache_memory_sets_the_block_count(tiny):
    llm = LLM(tiny, max_model_len=256, max_num_seqs=4, block_size=16, kv_cache_memory=8 * BYTES_PER_BLOCK - 1)
    assert llm.config.num_kv_blocks == 7 and llm.engine.block_manager.num_blocks == 7
    assert llm.model.model.layers[0].self_attn.key_cache.shape == (7, 16, 2, 16)
    out = llm.generate(PROMPT, SamplingParams(temperature=0, max_tokens=4, ignore_eos=True), use_tqdm=False)[0]
    assert len(out.outputs[0].token_ids) == 4
    # more bytes than max_num_seqs full-length sequences can use: capped at 4 * 256 / 16 blocks
    assert LLM(tiny, max_model_len=256, max_num_seqs=4, kv_cache_memory=1 << 30).config.num_kv_blocks == 64
    with pytest.raises(ValueError, match="^kv_cache_memory"):
        LLM(tiny, kv_cache_memory=BYTES_PER_BLOCK - 1)


def test_quantization_w8a8(tiny):
    llm = LLM(tiny, max_model_len=256, max_num_seqs=2, num_kv_blocks=16, quantization="w8a8")
    mlp = llm.model.model.layers[1].mlp
    assert llm.model.model.layers[0].self_attn.qkv_proj.quantized and mlp.down_proj.quantized
    out = llm.generate(PROMPT, SamplingParams(temperature=0, max_tokens=6, ignore_eos=True), use_tqdm=False)[0]
    model = load_model(tiny, quantization="w8a8").model
    driver, seq = PagedDriver(model, 1), list(PROMPT)
    logits = driver.step({0: seq})
    for _ in range(6):
        seq.append(int(logits[-1].argmax()))
        logits = driver.step({0: [seq[-1]]})
    assert out.outputs[0].token_ids == seq[len(PROMPT):]
    with pytest.raises(ValueError, match="quantization"):
        LLM(tiny, quantization="int4")


def _driver_greedy(model, steps: int, dtype: torch.dtype) -> list[int]:
    driver, seq = PagedDriver(model, 1, dtype=dtype), list(PROMPT)
    logits = driver.step({0: seq})
    for _ in range(steps):
        seq.append(int(logits[-1].argmax()))
        logits = driver.step({0: [seq[-1]]})
    return seq[len(PROMPT):]


@pytest.mark.parametrize("dtype", [None, torch.float32])
def test_quantization_w4a16(tiny, dtype):
    llm = LLM(tiny, dtype=dtype, max_model_len=256, max_num_seqs=2, num_kv_blocks=16, quantization="w4a16")
    want_dtype = dtype or torch.bfloat16  # W4A16: 16-bit activations unless asked otherwise
    assert llm.config.dtype == want_dtype and llm.model.model.embed_tokens.weight.dtype == want_dtype
    qkv = llm.model.model.layers[0].self_attn.qkv_proj
    assert (qkv.kind, qkv.group_size, llm.model.lm_head.kind) == ("w4a16", 32, "float")  # 32 divides 64 and 96
    out = llm.generate(PROMPT, SamplingParams(temperature=0, max_tokens=6, ignore_eos=True), use_tqdm=False)[0]
    model = load_model(tiny, dtype=dtype, quantization="w4a16").model
    assert out.outputs[0].token_ids == _driver_greedy(model, 6, want_dtype)
