"""BlockManager: property tests over random allocate / append / fork / free sequences, with the
real chained hash and with a hash that always collides. A shadow cache records, for every slot
written, the full token prefix its KV depends on; every prefix-cache hit must hand out blocks
whose recorded prefixes equal the new prompt's."""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings, strategies as st

from ascendtile.runtime.block_manager import BlockManager
from ascendtile.runtime.sampling_params import SamplingParams
from ascendtile.runtime.sequence import Sequence

BLOCK = 4


class Sim:
    def __init__(self, num_blocks: int, hash_fn) -> None:
        kwargs = {"hash_fn": hash_fn} if hash_fn else {}
        self.bm = BlockManager(num_blocks, BLOCK, **kwargs)
        self.kv: dict[tuple[int, int], tuple] = {}  # (block, offset) -> token prefix whose KV is there
        self.live: list[Sequence] = []
        self.next_id = 0
        self.hits = 0

    def new_seq(self, tokens: list[int]) -> Sequence:
        seq = Sequence(self.next_id, tokens, SamplingParams(max_tokens=1000), 10_000)
        self.next_id += 1
        return seq

    def compute(self, seq: Sequence) -> None:
        """What a model step does: write KV for every uncomputed token, then commit."""
        for pos in range(seq.num_computed_tokens, len(seq)):
            self.kv[(seq.block_table[pos // BLOCK], pos % BLOCK)] = tuple(seq.token_ids[:pos + 1])
        seq.advance(seq.num_uncomputed)
        self.bm.commit(seq)

    def allocate(self, tokens: list[int]) -> None:
        seq = self.new_seq(tokens)
        if not self.bm.can_allocate(seq):
            return
        blocks, cached = self.bm.allocate(seq)
        seq.assign_blocks(blocks, cached)
        assert cached % BLOCK == 0 and cached < len(seq)
        for pos in range(cached):  # every cached slot holds exactly this prompt's prefix
            assert self.kv[(seq.block_table[pos // BLOCK], pos % BLOCK)] == tuple(tokens[:pos + 1])
        self.hits += cached // BLOCK
        self.compute(seq)
        self.live.append(seq)

    def append(self, seq: Sequence, token: int) -> None:
        if self.bm.blocks_for(len(seq) + 1) - len(seq.block_table) > self.bm.num_free_blocks:
            return  # no room for the token's block
        seq.append_token(token, None, 0.0)
        assert self.bm.can_append(seq)
        seq.extend_blocks(self.bm.append(seq))
        self.compute(seq)

    def free(self, seq: Sequence) -> None:
        self.live.remove(seq)
        self.bm.free_seq(seq)
        seq.release_blocks()

    def check(self) -> None:
        owners = [0] * self.bm.num_blocks
        for seq in self.live:
            assert len(set(seq.block_table)) == len(seq.block_table), "block twice in one table"
            assert len(seq.block_table) == self.bm.blocks_for(len(seq))
            for b in seq.block_table:
                owners[b] += 1
        assert owners == self.bm.ref_counts
        assert set(self.bm.free) == {b for b, n in enumerate(owners) if n == 0}
        for h, b in self.bm.hash_to_block.items():
            assert self.bm.block_hash[b] == h


def _run(ops: list[tuple[str, int]], hash_fn) -> Sim:
    sim = Sim(24, hash_fn)
    bases = [[1, 2, 3, 1, 2, 3, 1, 2], [1, 2, 3, 1, 3, 3], [2, 2, 2, 2, 2, 2, 2, 2, 2]]
    for op, arg in ops:
        rng = random.Random(arg)
        if op == "alloc":
            base = bases[arg % len(bases)]
            sim.allocate(base[: rng.randrange(len(base) + 1)] + [rng.randrange(1, 4) for _ in range(rng.randrange(1, 9))])
        elif op == "fork" and sim.live:
            parent = rng.choice(sim.live)  # a child request continuing the parent's text shares its blocks
            sim.allocate(parent.token_ids + [rng.randrange(1, 4) for _ in range(rng.randrange(1, 5))])
        elif op == "append" and sim.live:
            sim.append(rng.choice(sim.live), rng.randrange(1, 4))
        elif op == "free" and sim.live:
            sim.free(rng.choice(sim.live))
        sim.check()
    for seq in list(sim.live):
        sim.free(seq)
    sim.check()
    assert sim.bm.num_free_blocks == sim.bm.num_blocks
    return sim


OPS = st.lists(st.tuples(st.sampled_from(["alloc", "fork", "append", "free"]), st.integers(0, 10**6)), max_size=80)


@settings(max_examples=150, deadline=None)
@given(OPS)
def test_random_operations_keep_invariants(ops):
    _run(ops, None)


@settings(max_examples=150, deadline=None)
@given(OPS)
def test_colliding_hash_never_returns_wrong_kv(ops):
    _run(ops, lambda prev, tokens: 0)


def test_prefix_hits_happen_and_freed_blocks_revive():
    sim = _run([("alloc", 0)] * 1, None)  # leaves everything freed but still registered
    prompt = [1, 2, 3, 1, 2, 3, 1, 2, 9]
    sim.allocate(prompt)
    sim.free(sim.live[0])
    before = sim.hits
    sim.allocate(prompt)
    assert sim.hits - before == 2  # both full blocks revived from the free list
    assert sim.live[0].num_computed_tokens == len(prompt)


def test_last_token_never_matched():
    sim = Sim(8, None)
    sim.allocate([1, 2, 3, 4, 5, 6, 7, 8])
    seq = sim.new_seq([1, 2, 3, 4, 5, 6, 7, 8])
    assert sim.bm.allocate(seq).num_cached_tokens == 4  # the second block would cover the last token: recomputed


def test_eviction_takes_oldest_freed_first():
    bm = BlockManager(4, BLOCK)
    seqs = [Sequence(i, [i + 1] * BLOCK, SamplingParams(), 100) for i in range(2)]
    for s in seqs:
        s.assign_blocks(*bm.allocate(s))
    bm.free_seq(seqs[1])
    bm.free_seq(seqs[0])
    assert list(bm.free) == [2, 3, 1, 0]


def test_rejects_empty_pool():
    with pytest.raises(ValueError, match="^num_blocks"):
        BlockManager(0, BLOCK)
