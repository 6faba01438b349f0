"""LLM end to end on the deterministic stub model: every request's greedy output must equal the
oracle (computed from the token history directly), whatever the batch composition, prefix
caching, chunk size, cache size (preemption) or graph bucketing. Plus stop conditions, seeded
sampling and logprobs (bad requests: test_bad_requests.py; the soak: test_soak.py)."""
from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from ascendtile.bench.stub_model import CHARS, EOS, VOCAB, oracle_greedy, stub_loaded
from ascendtile.runtime import LLM, SamplingParams

GREEDY = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)


def make_llm(**kw) -> LLM:
    args = dict(max_model_len=256, max_num_seqs=16, max_num_batched_tokens=64, block_size=4, num_kv_blocks=256)
    args.update(kw)
    return LLM(stub_loaded(), **args)


def mixed_prompts(n: int, seed: int = 0) -> list[list[int]]:
    """Mixed lengths (1..60) with shared prefixes, so the prefix cache gets hits."""
    rng = random.Random(seed)
    shared = [rng.randrange(1, VOCAB) for _ in range(20)]
    out = []
    for i in range(n):
        head = shared[: rng.randrange(0, 21)] if i % 2 else []
        out.append(head + [rng.randrange(1, VOCAB) for _ in range(rng.randrange(1, 41))])
    return out


def token_ids(outputs) -> list[list[int]]:
    return [o.outputs[0].token_ids for o in outputs]


CONFIGS = {
    "default": {},
    "no_prefix_cache": {"enable_prefix_caching": False},
    "small_chunks": {"max_num_batched_tokens": 16, "max_num_seqs": 4},
    "graph_off": {"graph": "off"},
    "tiny_cache": {"num_kv_blocks": 24},  # 16 sequences of up to 84 tokens cannot all fit: preemption
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_batch_of_16_equals_oracle_and_running_alone(name):
    llm = make_llm(**CONFIGS[name])
    prompts = mixed_prompts(16)
    outputs = llm.generate(prompts, GREEDY, use_tqdm=False)
    assert token_ids(outputs) == [oracle_greedy(p, 24, eos=None) for p in prompts]
    assert [o.prompt_token_ids for o in outputs] == prompts  # input order
    stats = llm.last_stats
    if name == "tiny_cache":
        assert stats.num_preemptions > 0 and any(o.metrics.num_preemptions for o in outputs)
    if name == "default":
        assert sum(o.metrics.num_cached_tokens for o in outputs) > 0
    alone = llm.generate([prompts[5]], GREEDY, use_tqdm=False)
    assert token_ids(alone) == [outputs[5].outputs[0].token_ids]
    assert llm.engine.block_manager.num_free_blocks == llm.config.num_kv_blocks


def test_cpu_decode_batches_run_unpadded():
    llm = make_llm()
    model = llm.model
    llm.generate(mixed_prompts(5), GREEDY, use_tqdm=False)
    decode_calls = [(t, b) for t, b in model.calls if t == b]
    assert llm.engine.runner.graph_runner is None  # nothing to capture on CPU
    assert (5, 5) in decode_calls and (8, 8) not in decode_calls  # 5 sequences run as 5, not a bucket of 8


def test_eos_stop_ids_and_length():
    llm = make_llm()
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    full = oracle_greedy(prompt, 40, eos=None)
    stop_at = next(i for i in range(3, 40) if full[i] not in full[:i])
    out = llm.generate(prompt, SamplingParams(temperature=0, max_tokens=40, ignore_eos=True,
                                              stop_token_ids=[full[stop_at]]), use_tqdm=False)[0].outputs[0]
    assert out.token_ids == full[: stop_at + 1] and out.finish_reason == "stop" and out.stop_reason == full[stop_at]
    assert out.text == "".join(CHARS[t] for t in full[:stop_at])  # the stop token is not text
    out = llm.generate(prompt, SamplingParams(temperature=0, max_tokens=7, ignore_eos=True), use_tqdm=False)[0].outputs[0]
    assert out.token_ids == full[:7] and out.finish_reason == "length"
    eos_prompt = next(p for p in mixed_prompts(200, seed=3) if oracle_greedy(p, 30)[-1] == EOS)
    expected = oracle_greedy(eos_prompt, 30)
    out = llm.generate(eos_prompt, SamplingParams(temperature=0, max_tokens=30), use_tqdm=False)[0].outputs[0]
    assert out.token_ids == expected and expected[-1] == EOS and out.finish_reason == "stop"
    assert out.stop_reason is None


def test_max_model_len_caps_generation():
    llm = make_llm(max_model_len=20)
    out = llm.generate([1] * 15, SamplingParams(temperature=0, max_tokens=50, ignore_eos=True), use_tqdm=False)[0]
    assert len(out.outputs[0].token_ids) == 5 and out.outputs[0].finish_reason == "length"


def test_stop_string_cut_from_text():
    llm = make_llm()
    prompt = CHARS[5:17]
    full = "".join(CHARS[t] for t in oracle_greedy(llm.tokenizer.encode(prompt), 40, eos=None))
    stop = full[10:12]
    at = full.find(stop)
    out = llm.generate(prompt, SamplingParams(temperature=0, max_tokens=40, ignore_eos=True, stop=[stop, "never!"]),
                       use_tqdm=False)[0]
    assert out.prompt == prompt
    assert out.outputs[0].text == full[:at]
    assert out.outputs[0].finish_reason == "stop" and out.outputs[0].stop_reason == stop
    assert len(out.outputs[0].token_ids) == at + len(stop)  # one char per token: stops on the token completing it


def test_vllm_prompt_dicts_run_as_their_text_and_ids():
    """vLLM's TextPrompt and TokensPrompt dicts, alone or mixed with plain prompts (NumPy and 0-dim
    tensor token ids too), give what their plain forms give; a text dict keeps its text."""
    llm = make_llm()
    text, ids = CHARS[5:17], [7, 8, 9, 10]
    plain = llm.generate([text, ids], GREEDY, use_tqdm=False)
    dicts = llm.generate([{"prompt": text}, {"prompt_token_ids": [np.int64(7), torch.tensor(8), 9, 10]}], GREEDY,
                         use_tqdm=False)
    assert token_ids(dicts) == token_ids(plain) == [oracle_greedy(llm.tokenizer.encode(text), 24, eos=None),
                                                  oracle_greedy(ids, 24, eos=None)]
    assert [o.prompt for o in dicts] == [text, None] and dicts[1].prompt_token_ids == ids
    single = llm.generate({"prompt_token_ids": ids}, GREEDY, use_tqdm=False)
    assert token_ids(single) == token_ids(plain)[1:]


def test_seeded_sampling_reproducible_in_any_batch():
    llm = make_llm()
    seeded = SamplingParams(temperature=1.0, top_k=20, max_tokens=20, seed=1234, ignore_eos=True)
    prompts = mixed_prompts(6, seed=7)
    alone = token_ids(llm.generate(prompts[2], seeded, use_tqdm=False))[0]
    mixed = [SamplingParams(temperature=0.8, max_tokens=15, ignore_eos=True)] * 6
    mixed[2] = seeded
    batched = token_ids(llm.generate(prompts, mixed, use_tqdm=False))
    assert batched[2] == alone
    other = token_ids(llm.generate(prompts[2], SamplingParams(temperature=1.0, top_k=20, max_tokens=20, seed=99,
                                                              ignore_eos=True), use_tqdm=False))[0]
    assert other != alone
    assert alone != oracle_greedy(prompts[2], 20, eos=None)  # it really sampled


def test_logprobs_are_the_models_log_softmax():
    llm = make_llm()
    prompt = [7, 8, 9, 10]
    out = llm.generate(prompt, SamplingParams(temperature=0, max_tokens=3, logprobs=2, ignore_eos=True),
                       use_tqdm=False)[0].outputs[0]
    expected = torch.log_softmax(-0.5 * torch.arange(VOCAB).float(), 0)  # stub logits around the target
    for token, entry in zip(out.token_ids, out.logprobs):
        assert len(entry) == 2 and entry[token] == pytest.approx(expected[0].item(), abs=1e-5)
    assert out.cumulative_logprob == pytest.approx(3 * expected[0].item(), abs=1e-4)


def test_chat_applies_template_and_metrics():
    llm = make_llm()
    conv = [{"role": "user", "content": "Hello"}]
    outs = llm.chat([conv, conv + [{"role": "assistant", "content": "x"}]], GREEDY, use_tqdm=False)
    assert outs[0].prompt == "HelloZ" and outs[1].prompt == "HelloxZ"
    assert outs[0].outputs[0].token_ids == oracle_greedy(llm.tokenizer.encode("HelloZ"), 24, eos=None)
    m = outs[0]
    assert m.metrics.time_to_first_token > 0 and len(m.per_token_latency) == 23 and m.mean_per_token_latency > 0


def test_bad_arguments_name_the_argument():
    llm = make_llm()
    with pytest.raises(ValueError, match="^prompts"):
        llm.generate([[1, VOCAB]], use_tqdm=False)
    with pytest.raises(ValueError, match="^sampling_params"):
        llm.generate([[1], [2]], [GREEDY], use_tqdm=False)
    with pytest.raises(ValueError, match="^temperature"):
        SamplingParams(temperature=-1)
    with pytest.raises(ValueError, match="^top_p"):
        SamplingParams(top_p=0)
    with pytest.raises(ValueError, match="^max_model_len"):
        make_llm(max_model_len=10**6)
    with pytest.raises(ValueError, match="^graph"):
        make_llm(graph="always")
    with pytest.raises(ValueError, match="^max_num_batched_tokens"):
        make_llm(max_num_seqs=16, max_num_batched_tokens=8)
