"""Scheduler: token budget and sequence cap per step, chunked prefill that never starves decodes,
preemption of the most recently admitted sequence, and requests that can never fit."""
from __future__ import annotations

from ascendkit.runtime.block_manager import BlockManager
from ascendkit.runtime.sampling_params import SamplingParams
from ascendkit.runtime.scheduler import Scheduler
from ascendkit.runtime.sequence import Sequence, SequenceStatus

BLOCK = 4


def make(num_blocks=64, max_num_seqs=4, budget=8, max_model_len=512) -> Scheduler:
    return Scheduler(BlockManager(num_blocks, BLOCK), max_num_seqs, budget, max_model_len)


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


def test_never_fitting_requests_finish_with_error():
    sched = make(num_blocks=4, max_model_len=20)
    too_long = new(0, 20)
    too_big = Sequence(1, [1] * 10, SamplingParams(max_tokens=9), 20)  # 19 tokens = 5 blocks > 4
    empty = Sequence(2, [], SamplingParams(), 20)
    for s in (too_long, too_big, empty):
        assert not sched.add(s)
        assert s.finish_reason == "error" and s.error
    assert not sched.has_unfinished()
