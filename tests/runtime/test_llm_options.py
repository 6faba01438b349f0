"""LLM constructor options on a tiny random Llama (2 layers, 2 KV heads of 16): kv_cache_memory
sizes the cache in bytes; quantization="w8a8" runs the int8-weight model, token for token what
the paged-cache driver gets from load_model(..., quantization="w8a8"); quantization="w4a16"
likewise, in bf16 unless a dtype is given; kv_cache_dtype="int8" runs on int8 caches with scale
caches, token for token what the driver gets over an int8 cache, and fits ≥ 1.8x the blocks of a
bf16 cache in the same kv_cache_memory (head size 64, MLA latent 80)."""
from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig

from ascendtile.model import LoadedModel, build_model, load_model, parse_config
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


def test_kv_cache_dtype_int8(tiny):
    llm = LLM(tiny, max_model_len=256, max_num_seqs=2, num_kv_blocks=16, kv_cache_dtype="int8")
    attn = llm.model.model.layers[1].self_attn
    assert attn.key_cache.dtype == attn.value_cache.dtype == torch.int8 and attn.key_cache.shape == (16, 16, 2, 16)
    assert attn.k_scale_cache.shape == attn.v_scale_cache.shape == (16, 2, 16)
    out = llm.generate(PROMPT, SamplingParams(temperature=0, max_tokens=6, ignore_eos=True), use_tqdm=False)[0]
    assert attn.k_scale_cache.any()  # written beside the cache
    driver, seq = PagedDriver(load_model(tiny).model, 1, kv_cache_dtype="int8"), list(PROMPT)
    logits = driver.step({0: seq})
    for _ in range(6):
        seq.append(int(logits[-1].argmax()))
        logits = driver.step({0: [seq[-1]]})
    assert out.outputs[0].token_ids == seq[len(PROMPT):]
    for bad in ("fp8", "int4", torch.int8):
        with pytest.raises(ValueError, match="^kv_cache_dtype"):
            LLM(tiny, kv_cache_dtype=bad)


@pytest.mark.parametrize("fields", [
    {"architectures": ["LlamaForCausalLM"], "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64},
    {"architectures": ["DeepseekV2ForCausalLM"], "num_attention_heads": 4, "num_key_value_heads": 4,
     "kv_lora_rank": 64, "q_lora_rank": None, "qk_rope_head_dim": 16, "qk_nope_head_dim": 16, "v_head_dim": 16,
     "moe_intermediate_size": 16, "n_routed_experts": 4, "n_shared_experts": 1, "num_experts_per_tok": 2,
     "first_k_dense_replace": 1, "n_group": 1, "topk_group": 1},
], ids=["llama_head_64", "deepseek_latent_80"])
def test_int8_cache_holds_more_blocks_than_bf16(fields):
    """The same kv_cache_memory holds >= 1.8x the blocks as int8 (1 byte per value and an fp32 scale
    per token and KV head, or per MLA part) than in bf16: head size 64 gives 2·64 / (64 + 4) = 1.88x,
    an MLA latent of 64 + 16 gives 2·80 / (80 + 8) = 1.82x."""
    config = parse_config({"vocab_size": 96, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
                           "max_position_embeddings": 4096, "eos_token_id": 3, **fields})
    loaded = LoadedModel(build_model(config, torch.bfloat16, "cpu").eval(), None, config)
    blocks = {kv: LLM(loaded, dtype=torch.bfloat16, max_model_len=4096, kv_cache_memory=1 << 20,
                      kv_cache_dtype=kv).config.num_kv_blocks for kv in ("auto", "int8")}
    assert blocks["int8"] >= 1.8 * blocks["auto"], blocks
