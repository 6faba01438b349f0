"""Scheduler: token budget and sequence cap per step, chunked prefill that never starves decodes,
preemption of the most recently admitted sequence, requests that can never fit, and admission
that keeps a watermark of free blocks for running sequences to grow into."""
from __future__ import annotations

from ascendtile.runtime.block_manager import BlockManager
from ascendtile.runtime.sampling_params import SamplingParams
import pytest

from ascendtile.bench.stub_model import oracle_greedy, stub_loaded
from ascendtile.runtime import LLM
from ascendtile.runtime.scheduler import Scheduler, watermark_blocks
from ascendtile.runtime.sequence import Sequence, SequenceStatus

BLOCK = 4


def make(num_blocks=64, max_num_seqs=4, budget=8, watermark=0) -> Scheduler:
    return Scheduler(BlockManager(num_blocks, BLOCK), max_num_seqs, budget, watermark)


def new(i: int, n: int, max_tokens: int = 16) -> Sequence:
    return Sequence(i, [(i + k) % 7 + 1 for k in range(n)], SamplingParams(max_tokens=max_tokens), 512)


def advance(sched: Scheduler, batch) -> None:
    """What the engine does after a step: mark the chunk computed, append a token when sampled."""
    for seq, n in zip(batch.seqs, batch.num_new_tokens):
        seq.advance(n)
        sched.block_manager.commit(seq)
        if seq.num_computed_tokens == len(seq):
            seq.append_token(1, None, 0.0)


def test_long_prompt_chunked_and_decodes_never_starved():
    sched = make(budget=8)
    short = new(0, 3)
    sched.add(short)
    advance(sched, sched.schedule())  # short prefilled, now decoding
    long = new(1, 30)
    sched.add(long)
    chunks = []
    while long.num_computed_tokens < 30:
        batch = sched.schedule()
        assert batch.num_tokens <= 8 and batch.seqs[0] is short and batch.num_new_tokens[0] == 1
        chunks.append(batch.num_new_tokens[batch.seqs.index(long)])
        advance(sched, batch)
    assert chunks == [7, 7, 7, 7, 2] and len(long) == 31


def test_sequence_cap_and_budget():
    sched = make(max_num_seqs=2, budget=8)
    seqs = [new(i, 3) for i in range(4)]
    for s in seqs:
        sched.add(s)
    batch = sched.schedule()
    assert batch.seqs == seqs[:2] and len(sched.waiting) == 2
    advance(sched, batch)
    assert sched.schedule().is_decode


def test_preempts_latest_admitted_and_requeues_it_first():
    sched = make(num_blocks=3, max_num_seqs=4, budget=16)
    a, b = new(0, 4, max_tokens=4), new(1, 4, max_tokens=4)
    sched.add(a)
    sched.add(b)
    batch = sched.schedule()  # one block each; one left
    assert batch.seqs == [a, b]
    advance(sched, batch)  # both now hold 5 tokens: each needs a second block
    batch = sched.schedule()  # a takes the last block; b (admitted last) is preempted
    assert batch.seqs == [a] and sched.num_preemptions == 1 and list(sched.waiting) == [b]
    assert b.status is SequenceStatus.WAITING and b.num_computed_tokens == 0 and not b.block_table
    assert b.metrics.num_preemptions == 1 and len(b) == 5  # its sampled token is kept, recomputed later
    advance(sched, batch)
    assert sched.schedule().seqs == [a]  # no admission while a still grows into the cache


def test_request_larger_than_the_cache_finishes_with_error():
    sched = make(num_blocks=4)
    too_big = Sequence(1, [1] * 10, SamplingParams(max_tokens=9), 20)  # 19 tokens = 5 blocks > 4
    assert not sched.add(too_big)
    assert too_big.finish_reason == "error" and "5 KV blocks" in too_big.error
    assert not sched.has_unfinished()
    fits = Sequence(2, [1] * 10, SamplingParams(max_tokens=6), 20)  # 16 tokens = the whole cache
    assert sched.add(fits) and sched.has_unfinished()


@pytest.mark.parametrize("num_blocks, expected", [(1, 0), (2, 1), (100, 1), (199, 1), (200, 2), (1000, 10)])
def test_watermark_is_one_percent_at_least_one(num_blocks, expected):
    assert watermark_blocks(num_blocks) == expected
    assert Scheduler(BlockManager(num_blocks, BLOCK), 1, 1).watermark == expected


def test_admission_keeps_the_watermark_free():
    sched = make(num_blocks=10, max_num_seqs=8, budget=64, watermark=2)
    first, second, third = new(0, 12), new(1, 16), new(2, 8)  # 3, 4 and 2 blocks
    for s in (first, second, third):
        sched.add(s)
    batch = sched.schedule()
    # first: admitted (nothing runs yet); second: 3 free left after it, >= 2; third: would leave 1 < 2
    assert batch.seqs == [first, second] and list(sched.waiting) == [third]
    assert sched.block_manager.num_free_blocks == 3


def test_watermark_waived_when_nothing_runs():
    sched = make(num_blocks=10, watermark=2)
    whole = new(0, 36, max_tokens=4)  # 9 blocks for the prompt, 10 in all
    sched.add(whole)
    assert sched.schedule().seqs == [whole] and sched.block_manager.num_free_blocks == 1


def test_bad_watermark_names_the_argument():
    with pytest.raises(ValueError, match="^watermark"):
        make(num_blocks=4, watermark=4)
    with pytest.raises(ValueError, match="^watermark"):
        make(num_blocks=4, watermark=-1)


def _run_until_done(sched: Scheduler, late: Sequence) -> None:
    """Step until every sequence reached its max_len, adding `late` after the first step."""
    advance(sched, sched.schedule())
    sched.add(late)
    while sched.has_unfinished():
        advance(sched, sched.schedule())
        for seq in list(sched.running):
            if len(seq) >= seq.max_len:
                seq.finish("length")
                sched.finish(seq)


@pytest.mark.parametrize("watermark, preemptions", [(0, 1), (1, 0)])
def test_watermark_avoids_preempting_a_fresh_prefill(watermark, preemptions):
    """A decodes and will need a second block next step; B's prompt needs exactly every free
    block. Without a watermark B is admitted, and A's growth preempts it at once (its prefill
    wasted); with one, B waits until A is done."""
    sched = make(num_blocks=6, budget=32, watermark=watermark)
    a, b = new(0, 3, max_tokens=6), new(1, 20, max_tokens=4)  # A: 1 block, growing to 3; B: 5 blocks
    sched.add(a)
    _run_until_done(sched, b)
    assert sched.num_preemptions == preemptions == b.metrics.num_preemptions
    assert len(a) == a.max_len and len(b) == b.max_len
    assert sched.block_manager.num_free_blocks == 6


def test_recompute_after_preemption_gives_the_same_tokens():
    """Greedy and seeded requests (half of these with penalties, whose counts are refilled after
    a preemption), preempted (tiny cache) and recomputed, match their runs alone."""
    from ascendtile.runtime import SamplingParams as SP

    prompts = [[(i * 5 + k) % 60 + 1 for k in range(6 + 3 * i)] for i in range(8)]
    penalties = dict(repetition_penalty=1.3, frequency_penalty=0.4)
    params = [SP(temperature=0, max_tokens=20, ignore_eos=True) if i % 2 else
              SP(temperature=1.0, top_k=8, max_tokens=20, seed=100 + i, ignore_eos=True, **(penalties if i % 4 else {}))
              for i in range(8)]
    tiny = LLM(stub_loaded(), max_model_len=64, max_num_seqs=8, max_num_batched_tokens=32, block_size=4,
               num_kv_blocks=20)
    outs = tiny.generate(prompts, params, use_tqdm=False)
    assert tiny.last_stats.num_preemptions > 0
    assert sum(o.metrics.num_preemptions for o in outs) == tiny.last_stats.num_preemptions
    roomy = LLM(stub_loaded(), max_model_len=64, max_num_seqs=8, max_num_batched_tokens=32, block_size=4,
                num_kv_blocks=128)
    for i, (p, sp) in enumerate(zip(prompts, params)):
        alone = roomy.generate([p], sp, use_tqdm=False)[0]
        assert alone.metrics.num_preemptions == 0
        assert outs[i].outputs[0].token_ids == alone.outputs[0].token_ids, i
        if sp.greedy:
            assert alone.outputs[0].token_ids == oracle_greedy(p, 20, eos=None)
