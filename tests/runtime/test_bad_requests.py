"""Bad requests never take others down. Malformed ones (empty prompt, token id outside the
vocabulary, prompt of max_model_len tokens, max_tokens < 1, an empty stop string, stop strings
without a tokenizer) raise a ValueError naming the request's index and field before any request
starts; the engine is left untouched and serves the next call. A request larger than the whole
cache finishes with finish_reason "error", and generation past max_model_len is capped
("length"), while every other request in the batch gets exactly the tokens it gets alone."""
from __future__ import annotations

import pytest

from ascendtile.bench.stub_model import VOCAB, StubConfig, StubModel, oracle_greedy, stub_loaded
from ascendtile.model import LoadedModel
from ascendtile.runtime import LLM, SamplingParams

GREEDY = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
GOOD = [[1, 2, 3], [7, 8, 9, 10, 11], [4, 4]]


def make_llm(model=None, **kw) -> LLM:
    args = dict(max_model_len=64, max_num_seqs=8, max_num_batched_tokens=32, block_size=4, num_kv_blocks=12)
    args.update(kw)
    return LLM(model or stub_loaded(), **args)


def mutated(**fields) -> SamplingParams:
    """Valid at construction, made invalid afterwards (the dataclass is mutable)."""
    params = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    for name, value in fields.items():
        setattr(params, name, value)
    return params


# (the bad request, its sampling params, the error it must raise); it goes in at index 1
REJECTED = {
    "empty_prompt": ([], GREEDY, r"^prompts\[1\]: the prompt is empty"),
    "empty_text_prompt": ("", GREEDY, r"^prompts\[1\]: the prompt is empty"),
    "token_id_at_vocab": ([1, VOCAB, 2], GREEDY, rf"^prompts\[1\]: token id {VOCAB} at position 1"),
    "negative_token_id": ([-1, 2], GREEDY, r"^prompts\[1\]: token id -1 at position 0"),
    "prompt_at_max_model_len": ([3] * 64, GREEDY, r"^prompts\[1\]: 64 tokens .* max_model_len 64"),
    "max_tokens_0": ([1, 2], mutated(max_tokens=0), r"^sampling_params\[1\]: max_tokens"),
    "empty_stop_string": ([1, 2], mutated(stop=["x", ""]), r"^sampling_params\[1\]: stop"),
    "prompt_dict_other_key": ({"prompt_token_ids": [1, 2], "multi_modal_data": {}}, GREEDY,
                              r"^prompts\[1\]: a prompt dict takes exactly one of .*'multi_modal_data'"),
    "prompt_dict_both_keys": ({"prompt": "ab", "prompt_token_ids": [1]}, GREEDY, r"^prompts\[1\]: a prompt dict"),
    "prompt_dict_text_as_ids": ({"prompt_token_ids": "ab"}, GREEDY,
                                r"^prompts\[1\]: 'prompt_token_ids' takes token ids"),
    "empty_prompt_dict": ({"prompt_token_ids": []}, GREEDY, r"^prompts\[1\]: the prompt is empty"),
    "non_integer_token": ([1, 2.0], GREEDY, r"^prompts\[1\]: expected .* holding non-integers"),
    "not_a_prompt": (None, GREEDY, r"^prompts\[1\]: expected a str, .* got NoneType$"),
}


@pytest.mark.parametrize("case", list(REJECTED))
def test_malformed_request_raises_before_any_work(case):
    llm = make_llm()
    prompt, params, match = REJECTED[case]
    steps, next_id = llm.engine.num_steps, llm.engine.next_seq_id
    with pytest.raises(ValueError, match=match):
        llm.generate([GOOD[0], prompt, GOOD[1]], [GREEDY, params, GREEDY], use_tqdm=False)
    assert llm.engine.num_steps == steps and llm.engine.next_seq_id == next_id  # nothing was queued or run
    assert not llm.engine.has_unfinished()
    assert llm.engine.block_manager.num_free_blocks == llm.config.num_kv_blocks
    outs = llm.generate(GOOD, GREEDY, use_tqdm=False)  # the engine still serves the next call
    assert [o.outputs[0].token_ids for o in outs] == [oracle_greedy(p, 12, eos=None) for p in GOOD]


def test_invalid_sampling_params_refused_at_construction():
    with pytest.raises(ValueError, match="^max_tokens"):
        SamplingParams(max_tokens=0)
    with pytest.raises(ValueError, match="^stop"):
        SamplingParams(stop="")
    with pytest.raises(ValueError, match="^stop"):
        SamplingParams(stop=["ok", ""])


def test_stop_strings_without_a_tokenizer_raise():
    llm = make_llm(LoadedModel(StubModel(), None, StubConfig()))
    with pytest.raises(ValueError, match=r"^sampling_params\[1\]: stop: .*tokenizer"):
        llm.generate([[1, 2], [3, 4]], [GREEDY, SamplingParams(stop=["b"])], use_tqdm=False)
    assert not llm.engine.has_unfinished() and llm.engine.next_seq_id == 0


def test_oversized_and_capped_requests_leave_the_others_untouched():
    """12 blocks of 4 = 48 tokens of cache, max_model_len 64."""
    llm = make_llm()
    too_big = [5] * 40  # 40 + 30 tokens asked, capped at 64: 16 blocks > 12 -> error
    fits_capped = [2] * 40  # the same on a 64-block cache below: capped at 64, "length"
    long_ask = SamplingParams(temperature=0, max_tokens=30, ignore_eos=True)
    prompts = [GOOD[0], too_big, GOOD[1], GOOD[2]]
    outs = llm.generate(prompts, [GREEDY, long_ask, GREEDY, GREEDY], use_tqdm=False)
    assert [o.outputs[0].finish_reason for o in outs] == ["length", "error", "length", "length"]
    assert "16 KV blocks" in outs[1].error and "12" in outs[1].error and not outs[1].outputs[0].token_ids
    for i in (0, 2, 3):
        alone = llm.generate([prompts[i]], GREEDY, use_tqdm=False)[0]
        assert outs[i].outputs[0].token_ids == alone.outputs[0].token_ids == oracle_greedy(prompts[i], 12, eos=None)
    roomy = make_llm(num_kv_blocks=64)
    outs = roomy.generate([GOOD[0], fits_capped, GOOD[1]], [GREEDY, long_ask, GREEDY], use_tqdm=False)
    assert outs[1].outputs[0].finish_reason == "length"
    assert outs[1].outputs[0].token_ids == oracle_greedy(fits_capped, 64 - 40, eos=None)  # capped at max_model_len
    assert [outs[0].outputs[0].token_ids, outs[2].outputs[0].token_ids] == \
        [oracle_greedy(GOOD[0], 12, eos=None), oracle_greedy(GOOD[1], 12, eos=None)]
    bm = llm.engine.block_manager
    assert bm.num_free_blocks == bm.num_blocks and not any(bm.ref_counts)
