"""Soak: 500 mixed requests — greedy and seeded sampling, stop strings, stop token ids, EOS,
shared prefixes, short and long prompts, generation capped at max_model_len, and requests larger
than the whole cache — through a cache small enough to preempt often, on the stub model. Every
request finishes; only the oversized ones with an error; each valid one gets exactly the tokens
it gets alone (and greedy ones without stop strings equal the oracle); no block leaks."""
from __future__ import annotations

import random

import pytest

from ascendtile.bench.stub_model import CHARS, EOS, VOCAB, oracle_greedy, stub_loaded
from ascendtile.runtime import LLM, SamplingParams

N = 500
MAX_MODEL_LEN = 128
BLOCK = 4
CACHE_BLOCKS = 30  # 120 tokens: a request whose prompt + max_tokens passes that can never fit


def soak_requests(seed: int = 0) -> tuple[list[list[int]], list[SamplingParams], set[int]]:
    """Prompts, params and the indices of the requests too large for the cache."""
    rng = random.Random(seed)
    shared = [rng.randrange(1, VOCAB) for _ in range(40)]
    prompts, params, too_big = [], [], set()
    for i in range(N):
        head = shared[: rng.randrange(4, 41)] if i % 3 == 0 else []
        length = rng.randrange(1, 61 - len(head)) if rng.random() < 0.8 else rng.randrange(1, 12)
        prompt = head + [rng.randrange(1, VOCAB) for _ in range(length)]
        kind = i % 5
        max_tokens = rng.randrange(1, 41)
        if i % 50 == 7:  # 90 + 40 tokens, capped at 128: 32 blocks > 30
            prompt, max_tokens = [rng.randrange(1, VOCAB) for _ in range(90)], 40
            too_big.add(i)
        if kind in (0, 1):
            p = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=kind == 0)
        elif kind == 2:
            p = SamplingParams(temperature=0, max_tokens=max_tokens, stop=[CHARS[rng.randrange(1, VOCAB)]],
                               stop_token_ids=[rng.randrange(1, VOCAB)])
        else:
            p = SamplingParams(temperature=0.9, top_p=0.9, top_k=rng.choice([0, 10]), max_tokens=max_tokens,
                               seed=1000 + i, stop=[CHARS[rng.randrange(1, VOCAB)]] if kind == 4 else None)
        prompts.append(prompt)
        params.append(p)
    return prompts, params, too_big


@pytest.mark.slow
def test_soak_500_mixed_requests_through_a_preempting_cache():
    llm = LLM(stub_loaded(), max_model_len=MAX_MODEL_LEN, max_num_seqs=24, max_num_batched_tokens=48,
              block_size=BLOCK, num_kv_blocks=CACHE_BLOCKS)
    prompts, params, too_big = soak_requests()
    outs = llm.generate(prompts, params, use_tqdm=False)
    assert len(outs) == N and all(o.finished for o in outs)
    assert llm.last_stats.num_preemptions > 0 and sum(o.metrics.num_cached_tokens for o in outs) > 0
    assert {str, int} <= {type(o.outputs[0].stop_reason) for o in outs}  # stop strings and stop ids fired
    bm = llm.engine.block_manager
    assert bm.num_free_blocks == bm.num_blocks and not any(bm.ref_counts)
    assert not llm.engine.scheduler.running and not llm.engine.scheduler.waiting
    roomy = LLM(stub_loaded(), max_model_len=MAX_MODEL_LEN, max_num_seqs=1, max_num_batched_tokens=MAX_MODEL_LEN,
                block_size=BLOCK, num_kv_blocks=64)
    for i, (out, prompt, p) in enumerate(zip(outs, prompts, params)):
        completion = out.outputs[0]
        assert out.prompt_token_ids == prompt
        if i in too_big:
            assert completion.finish_reason == "error" and "KV blocks" in out.error and not completion.token_ids
            continue
        assert completion.finish_reason in ("stop", "length") and out.error is None, i
        alone = roomy.generate([prompt], p, use_tqdm=False)[0].outputs[0]
        assert (completion.token_ids, completion.text, completion.finish_reason) == \
            (alone.token_ids, alone.text, alone.finish_reason), i
        if p.greedy and not p.stop:
            room = min(p.max_tokens, MAX_MODEL_LEN - len(prompt))
            assert completion.token_ids == oracle_greedy(prompt, room, eos=None if p.ignore_eos else EOS), i
