"""Scheduler: continuous batching under a token budget and a sequence cap, chunked prefill and
preemption by recompute.

Each step: (1) running sequences — decodes first, then prefills in progress — each get their
next chunk (a decode is 1 token), in-order, while the token budget lasts; a sequence that needs
a new KV block when none is free preempts the most recently admitted running sequence (its
blocks are freed, it goes back to the front of the queue and is recomputed later). Decodes come
first, so a long prompt never starves them. (2) If nothing was preempted, waiting sequences are
admitted in arrival order while the sequence cap, the budget and the free blocks allow; a prompt
longer than the remaining budget is split across steps. A request needing more blocks than the
whole cache is finished at once with an error (LLM.generate has already refused malformed ones).

Admission keeps a watermark of free blocks (1 % of the cache, at least 1 — vLLM's default
fraction): a new prefill is admitted only if that many blocks stay free after its allocation,
so the running sequences can grow into the next block without preempting each other at once
when the cache fills. With nothing running there is nobody to protect, so the watermark is
waived: a request that needs nearly the whole cache still runs (alone).

The scheduler owns the waiting queue and the running list and moves sequences between them
through Sequence's own methods: it takes block ids from the BlockManager and hands them to the
sequence (assign_blocks / extend_blocks), marks admission (start_running), preemption
(reset_for_recompute) and the release of a finished sequence's blocks (release_blocks).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from ascendtile.runtime.block_manager import BlockManager
from ascendtile.runtime.sequence import Sequence, SequenceStatus

WATERMARK = 0.01  # share of the KV blocks admission leaves free for running sequences to grow


def watermark_blocks(num_blocks: int) -> int:
    """Free blocks admission keeps in reserve: WATERMARK of the cache, at least 1 (0 for a
    one-block cache, which could otherwise never admit beside a running sequence)."""
    return min(max(1, int(num_blocks * WATERMARK)), num_blocks - 1)


@dataclass
class ScheduledBatch:
    seqs: list[Sequence] = field(default_factory=list)
    num_new_tokens: list[int] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)  # sent back to the queue by this schedule

    def __len__(self) -> int:
        return len(self.seqs)

    @property
    def num_tokens(self) -> int:
        return sum(self.num_new_tokens)

    @property
    def is_decode(self) -> bool:
        """Every sequence computes exactly its one newest token."""
        return all(n == 1 and s.num_uncomputed == 1 for s, n in zip(self.seqs, self.num_new_tokens))


class Scheduler:
    def __init__(self, block_manager: BlockManager, max_num_seqs: int, max_num_batched_tokens: int,
                 watermark: int | None = None) -> None:
        """watermark: free blocks admission keeps (default watermark_blocks(num_blocks))."""
        if max_num_batched_tokens < max_num_seqs:
            raise ValueError(f"max_num_batched_tokens: {max_num_batched_tokens} < max_num_seqs {max_num_seqs}: "
                             "a full batch of decodes must fit in one step")
        if watermark is None:
            watermark = watermark_blocks(block_manager.num_blocks)
        if not 0 <= watermark < block_manager.num_blocks:
            raise ValueError(f"watermark: must be in [0, {block_manager.num_blocks}) blocks, got {watermark}")
        self.block_manager = block_manager
        self.max_num_seqs, self.max_num_batched_tokens = max_num_seqs, max_num_batched_tokens
        self.watermark = watermark
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.num_preemptions = 0

    def add(self, seq: Sequence) -> bool:
        """Queue seq, or finish it with finish_reason "error" if the whole cache cannot hold it."""
        blocks = self.block_manager.blocks_for(seq.max_len)
        if blocks > self.block_manager.num_blocks:
            seq.finish("error", error=f"needs {blocks} KV blocks for {seq.max_len} tokens; the whole cache has "
                       f"{self.block_manager.num_blocks}")
        else:
            self.waiting.append(seq)
        return not seq.is_finished

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> ScheduledBatch:
        batch, budget = ScheduledBatch(), self.max_num_batched_tokens
        scheduled: set[int] = set()
        order = [s for s in self.running if s.num_uncomputed == 1] + [s for s in self.running if s.num_uncomputed > 1]
        for seq in order:
            if budget == 0:
                break
            if seq.status is not SequenceStatus.RUNNING:  # preempted earlier in this loop
                continue
            while not self.block_manager.can_append(seq):
                victim = next(s for s in reversed(self.running) if s.seq_id not in scheduled)
                self._preempt(victim)
                batch.preempted.append(victim)
                if victim is seq:
                    break
            else:
                seq.extend_blocks(self.block_manager.append(seq))
                n = min(seq.num_uncomputed, budget)
                batch.seqs.append(seq)
                batch.num_new_tokens.append(n)
                scheduled.add(seq.seq_id)
                budget -= n
        while not batch.preempted and self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            if not self.block_manager.can_allocate(seq, reserve=self.watermark if self.running else 0):
                break
            self.waiting.popleft()
            seq.assign_blocks(*self.block_manager.allocate(seq))
            seq.start_running()
            self.running.append(seq)
            n = min(seq.num_uncomputed, budget)
            batch.seqs.append(seq)
            batch.num_new_tokens.append(n)
            budget -= n
        return batch

    def _preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.block_manager.free_seq(seq)
        seq.reset_for_recompute()
        self.num_preemptions += 1
        self.waiting.appendleft(seq)

    def finish(self, seq: Sequence) -> None:
        """Release a sequence the engine just finished (stop condition met)."""
        self.running.remove(seq)
        self.block_manager.free_seq(seq)
        seq.release_blocks()
