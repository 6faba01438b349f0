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

Speculative decoding (a Drafter given): a chunk that reaches a sequence's last token while the
sequence already has output tokens (a decode, or the last chunk of a recompute after preemption)
carries the Drafter's draft tokens after it, up to num_speculative_tokens: the budget counts
1 + drafts, and blocks are allocated for the drafts too. The first sample after the prompt has
no drafts (as vLLM). Drafts are not cut to fit the batch, with one unavoidable exception: a
chunk longer than one token whose drafts do not fit the budget stops one token short instead
(the next step verifies that token with its drafts), but a decode (one token) whose 1 + drafts
exceed what is left of the budget gets only the drafts that fit (vLLM's rule), since deferring
it could starve it. That happens only when max_num_batched_tokens is below the decodes' summed
1 + num_speculative_tokens; otherwise a seeded request draws the same tokens alone, batched and
after preemption.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from ascendtile.runtime.block_manager import BlockManager
from ascendtile.runtime.drafter import Drafter
from ascendtile.runtime.sequence import Sequence, SequenceStatus

WATERMARK = 0.01  # share of the KV blocks admission leaves free for running sequences to grow


def watermark_blocks(num_blocks: int) -> int:
    """Free blocks admission keeps in reserve: WATERMARK of the cache, at least 1 (0 for a
    one-block cache, which could otherwise never admit beside a running sequence)."""
    return min(max(1, int(num_blocks * WATERMARK)), num_blocks - 1)


@dataclass
class ScheduledBatch:
    seqs: list[Sequence] = field(default_factory=list)
    num_new_tokens: list[int] = field(default_factory=list)  # of each sequence's own tokens (drafts not counted)
    preempted: list[Sequence] = field(default_factory=list)  # sent back to the queue by this schedule
    # each sequence's draft tokens, verified after its chunk (only when the chunk reaches its last token)
    draft_token_ids: list[list[int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.draft_token_ids:
            self.draft_token_ids = [[] for _ in self.seqs]

    def __len__(self) -> int:
        return len(self.seqs)

    def add(self, seq: Sequence, num_new_tokens: int, drafts: list[int]) -> None:
        self.seqs.append(seq)
        self.num_new_tokens.append(num_new_tokens)
        self.draft_token_ids.append(drafts)

    @property
    def num_tokens(self) -> int:
        return sum(self.num_new_tokens) + sum(len(d) for d in self.draft_token_ids)

    @property
    def is_decode(self) -> bool:
        """Every sequence computes exactly its one newest token (and verifies no drafts)."""
        return all(n == 1 and s.num_uncomputed == 1 and not d
                   for s, n, d in zip(self.seqs, self.num_new_tokens, self.draft_token_ids))


class Scheduler:
    def __init__(self, block_manager: BlockManager, max_num_seqs: int, max_num_batched_tokens: int,
                 watermark: int | None = None, drafter: Drafter | None = None) -> None:
        """watermark: free blocks admission keeps (default watermark_blocks(num_blocks)); drafter:
        the draft tokens of speculative decoding (None: off)."""
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
        self.drafter = drafter
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
            n, drafts = self._chunk(seq, budget, self._drafts(seq))
            while not self.block_manager.can_append(seq, len(drafts)):
                victim = next(s for s in reversed(self.running) if s.seq_id not in scheduled)
                self._preempt(victim)
                batch.preempted.append(victim)
                if victim is seq:
                    break
            else:
                seq.extend_blocks(self.block_manager.append(seq, len(drafts)))
                batch.add(seq, n, drafts)
                scheduled.add(seq.seq_id)
                budget -= n + len(drafts)
        while not batch.preempted and self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            drafts = self._drafts(seq)  # blocks for them before the prefix-cache hits say what is computed
            if not self.block_manager.can_allocate(seq, reserve=self.watermark if self.running else 0,
                                                   lookahead=len(drafts)):
                break
            self.waiting.popleft()
            seq.assign_blocks(*self.block_manager.allocate(seq, len(drafts)))
            seq.start_running()
            self.running.append(seq)
            n, drafts = self._chunk(seq, budget, drafts)
            batch.add(seq, n, drafts)
            budget -= n + len(drafts)
        return batch

    def _drafts(self, seq: Sequence) -> list[int]:
        """The drafts seq would verify with its last token (none before its first output token)."""
        return self.drafter.propose(seq) if self.drafter is not None and seq.num_output_tokens else []

    def _chunk(self, seq: Sequence, budget: int, drafts: list[int]) -> tuple[int, list[int]]:
        """(tokens of seq to compute, drafts after them) in a step with `budget` tokens left:
        drafts only when the chunk reaches seq's last token (the module docstring's rules)."""
        n = min(seq.num_uncomputed, budget)
        if n < seq.num_uncomputed or n + len(drafts) <= budget:
            return n, drafts if n == seq.num_uncomputed else []
        if n > 1:
            return n - 1, []  # the last token waits for the next step, with its drafts
        return n, drafts[:budget - n]

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
        if self.drafter is not None:
            self.drafter.release(seq)
