"""LLM.generate with every op on the Triton path (kernels under the interpreter) on a tiny
2-layer random Llama: decode batches at their own size (CPU captures nothing, so nothing is
padded) and, as on NPU, padded to graph buckets through an uncaptured GraphRunner; 16-token
prefill chunks and preemption by recompute (a 5-block cache); then static and dynamic W8A8 with a > 64-token prefill (w8a8_linear past its one-tile fused path); then the int8 KV cache
(kv_cache_dtype="int8") on the tiny Llama (chunks, preemption) and on a tiny DeepSeek-V2 (MLA).
Greedy tokens must equal the reference path's. Tiny because the interpreter runs every program in
Python."""
from __future__ import annotations

import copy

import pytest
from transformers import LlamaConfig

from ascendtile.model import LoadedModel, load_model, parse_config, quantize_w8a8
from ascendtile.runtime import LLM, SamplingParams
from ascendtile.runtime.graph_runner import GraphRunner
from model.helpers import PagedDriver, random_loaded, save_tiny

CONFIG = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, initializer_range=0.1,
                     max_position_embeddings=128)
# 14, 13 and 12 tokens (one 16-token block each) growing by 8: 6 blocks wanted, 5 in the cache
PROMPTS = [list(range(3, 17)), [5, 9, 100, 7, 2, 11, 40, 41, 42, 43, 44, 45, 46],
           [8, 8, 1, 2, 3, 70, 71, 72, 73, 74, 75, 76]]
GREEDY = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
SMALL = dict(max_model_len=64, max_num_seqs=4, max_num_batched_tokens=16, block_size=16, num_kv_blocks=5)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny_llama")
    save_tiny(CONFIG, path, randomize_norms=True)
    return str(path)


def run(model, monkeypatch, path: str, prompts, params, padded: bool = False, **config):
    """Generate on `path` ("reference" | "triton"); returns the LLM, the token ids and, per
    forward call, (tokens, padding rows). padded: decode steps go through the bucketed
    GraphRunner as on NPU/CUDA (uncaptured here), so their batches carry padding rows."""
    monkeypatch.setenv("ASCENDTILE_KERNELS", path)
    llm = LLM(model, **config)
    if padded:
        c = llm.config
        llm.engine.runner.graph_runner = GraphRunner(llm.model, c.max_num_seqs, c.max_model_len, c.block_size,
                                                     c.device, capture=False)
    calls = []
    llm.model.register_forward_pre_hook(lambda _, args: calls.append(
        (args[0].shape[0], int((args[2].seqused_k == 0).sum()))))
    outs = llm.generate(prompts, params, use_tqdm=False)
    return llm, [o.outputs[0].token_ids for o in outs], calls


@pytest.mark.slow
@pytest.mark.parametrize("padded", [False, True])
def test_generate_on_triton_path_with_chunks_and_preemption(tiny_dir, monkeypatch, padded):
    llm, got, calls = run(tiny_dir, monkeypatch, "triton", PROMPTS, GREEDY, padded, **SMALL)
    assert llm.last_stats.num_preemptions > 0
    assert any(pad for _, pad in calls) == padded, "padding rows only through the bucketed runner"
    assert max(n for n, _ in calls) == 16  # prompts were split into 16-token chunks
    _, expected, ref_calls = run(tiny_dir, monkeypatch, "reference", PROMPTS, GREEDY, padded, **SMALL)
    assert got == expected and calls == ref_calls  # same schedule, same tokens
    _, alone, _ = run(tiny_dir, monkeypatch, "reference", PROMPTS, GREEDY, max_model_len=64, num_kv_blocks=64,
                      graph="off")
    assert expected == alone  # and the schedule did not change them


def w8a8_model(directory: str, activation: str) -> LoadedModel:
    loaded = load_model(directory)
    calibration = None
    if activation == "static":
        def calibration(model):
            PagedDriver(model, 2).step({0: list(range(3, 30)), 1: [5, 9, 100, 7, 2]})
    quantized = quantize_w8a8(loaded.model, activation=activation, calibration=calibration)
    return LoadedModel(quantized, loaded.tokenizer, loaded.config)


@pytest.mark.slow
@pytest.mark.parametrize("activation", ["static", "dynamic"])
def test_w8a8_generate_on_triton_path_past_64_tokens(tiny_dir, monkeypatch, activation):
    prompts = [[(7 * k) % 120 + 3 for k in range(72)], [5, 9, 100, 7, 2]]  # 77 tokens in the first step
    params = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
    config = dict(max_model_len=96, max_num_seqs=2, max_num_batched_tokens=128, block_size=16)
    model = w8a8_model(tiny_dir, activation)
    assert (model.model.model.layers[0].mlp.down_proj.input_scale is not None) == (activation == "static")
    reference = LoadedModel(copy.deepcopy(model.model), model.tokenizer, model.config)
    _, got, calls = run(model, monkeypatch, "triton", prompts, params, **config)
    assert calls[0][0] == 77  # one prefill through w8a8_linear with M > 64
    _, expected, _ = run(reference, monkeypatch, "reference", prompts, params, **config)
    assert got == expected



def tiny_deepseek() -> LoadedModel:
    """A random 2-layer DeepSeek-V2 (MLA latent 32 + rope 16: the interpreter's dots need 16; one dense
    and one MoE layer)."""
    config = parse_config({"architectures": ["DeepseekV2ForCausalLM"], "vocab_size": 128, "hidden_size": 64,
                           "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
                           "num_key_value_heads": 4, "max_position_embeddings": 128, "eos_token_id": 3,
                           "kv_lora_rank": 32, "q_lora_rank": None, "qk_rope_head_dim": 16, "qk_nope_head_dim": 16,
                           "v_head_dim": 16, "moe_intermediate_size": 32, "n_routed_experts": 4,
                           "n_shared_experts": 1, "num_experts_per_tok": 2, "first_k_dense_replace": 1,
                           "n_group": 1, "topk_group": 1})
    return random_loaded(config)


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["llama", "deepseek_v2"])
def test_int8_kv_cache_generate_on_triton_path(tiny_dir, monkeypatch, arch):
    """The int8 cache written and read by the kernels (reshape_and_cache_flash / concat_and_cache_mla,
    unified / paged decode / MLA attention) gives the reference path's greedy tokens; the Llama run
    with 16-token chunks and preemption, as above."""
    def model():  # a fresh one per run (run hooks the model it is given)
        return tiny_dir if arch == "llama" else tiny_deepseek()

    config = {**SMALL, "kv_cache_dtype": "int8"}
    llm, got, calls = run(model(), monkeypatch, "triton", PROMPTS, GREEDY, **config)
    assert llm.last_stats.num_preemptions > 0
    _, expected, ref_calls = run(model(), monkeypatch, "reference", PROMPTS, GREEDY, **config)
    assert got == expected and calls == ref_calls
