"""BlockManager: the paged KV cache's bookkeeping — fixed-size blocks, reference counts, a free
list, and a hash-chained prefix cache over full blocks.

A full block whose KV has been computed is registered under hash(previous block's hash, its
tokens). A new sequence reuses the longest chain of registered blocks matching its prompt; a hit
is accepted only if the block's stored tokens equal the prompt's and its recorded parent is the
block just matched, in the same allocation generation — so by induction the whole prefix is
verified and a hash collision costs a miss, never wrong KV. Freed blocks keep their hash and go
to the back of the free list: they can be revived by a later hit until the allocator hands them
out again (oldest freed first).

The BlockManager reads sequences (token ids, block table, computed count) but never writes them:
allocate and append hand back block ids, which the scheduler gives to the sequence
(Sequence.assign_blocks / extend_blocks); after free_seq the scheduler has the sequence forget
its table (Sequence.release_blocks / reset_for_recompute).

Speculative decoding: `lookahead` blocks room for a step's draft tokens beyond the sequence's
tokens. Blocks that end up holding only rejected drafts stay in the table, allocated but never
committed (commit hashes only full blocks of computed, i.e. accepted, tokens); the next step's
writes reuse their slots, and free_seq returns them with the rest.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Callable, Hashable, NamedTuple

from ascendtile.runtime.sequence import Sequence

HashFn = Callable[[Hashable, tuple], Hashable]


def chain_hash(prev: Hashable, tokens: tuple) -> int:
    return hash((prev, tokens))


class Allocation(NamedTuple):
    block_ids: list[int]  # the sequence's whole block table
    num_cached_tokens: int  # leading tokens whose KV those blocks already hold (prefix-cache hits)


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True,
                 hash_fn: HashFn = chain_hash) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"num_blocks: need >= 1 blocks of >= 1 tokens, got {num_blocks} x {block_size}")
        self.num_blocks, self.block_size = num_blocks, block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.hash_fn = hash_fn
        self.ref_counts = [0] * num_blocks
        self.block_hash: list[Hashable | None] = [None] * num_blocks
        self.block_tokens: list[tuple | None] = [None] * num_blocks
        # (parent block id, parent's generation) of a registered block; generation counts how
        # often a block was handed out, so a child of an evicted-and-reused parent never matches
        self.block_parent: list[tuple[int, int] | None] = [None] * num_blocks
        self.generation = [0] * num_blocks
        self.hash_to_block: dict[Hashable, int] = {}
        self.free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))  # oldest freed first
        self.num_hashed: dict[int, int] = {}  # seq_id -> leading blocks of its table already registered

    @property
    def num_free_blocks(self) -> int:
        return len(self.free)

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def match_prefix(self, token_ids: list[int]) -> list[int]:
        """Cached blocks holding a prefix of token_ids. The last token is never matched: its
        logits are needed, so at least one token is always computed."""
        if not self.enable_prefix_caching:
            return []
        bs, prev, hits = self.block_size, None, []
        for i in range((len(token_ids) - 1) // bs):
            tokens = tuple(token_ids[i * bs:(i + 1) * bs])
            prev = self.hash_fn(prev, tokens)
            block = self.hash_to_block.get(prev)
            parent = (hits[-1], self.generation[hits[-1]]) if hits else None
            if block is None or self.block_tokens[block] != tokens or self.block_parent[block] != parent:
                break
            hits.append(block)
        return hits

    def _allocation_cost(self, seq: Sequence, lookahead: int) -> tuple[list[int], int]:
        hits = self.match_prefix(seq.token_ids)
        revived = sum(1 for b in hits if self.ref_counts[b] == 0)
        return hits, self.blocks_for(len(seq) + lookahead) - len(hits) + revived

    def can_allocate(self, seq: Sequence, reserve: int = 0, lookahead: int = 0) -> bool:
        """Whether seq's blocks (and `lookahead` draft tokens') can be allocated with at least
        `reserve` blocks still free after."""
        return self._allocation_cost(seq, lookahead)[1] + reserve <= len(self.free)

    def allocate(self, seq: Sequence, lookahead: int = 0) -> Allocation:
        """Blocks for all of seq's tokens plus `lookahead` draft tokens, reusing cached prefix
        blocks, and the number of tokens whose KV those already hold. The caller hands them to seq
        (Sequence.assign_blocks)."""
        assert not seq.block_table, "allocate: sequence already holds blocks"
        hits, cost = self._allocation_cost(seq, lookahead)
        if cost > len(self.free):
            raise RuntimeError(f"allocate: need {cost} free KV blocks, {len(self.free)} left")
        for block in hits:
            if self.ref_counts[block] == 0:
                del self.free[block]
            self.ref_counts[block] += 1
        blocks = hits + [self._take_free() for _ in range(self.blocks_for(len(seq) + lookahead) - len(hits))]
        self.num_hashed[seq.seq_id] = len(hits)
        return Allocation(blocks, len(hits) * self.block_size)

    def _take_free(self) -> int:
        block, _ = self.free.popitem(last=False)
        old = self.block_hash[block]
        if old is not None and self.hash_to_block.get(old) == block:
            del self.hash_to_block[old]
        self.block_hash[block] = self.block_tokens[block] = self.block_parent[block] = None
        self.generation[block] += 1
        self.ref_counts[block] = 1
        return block

    def can_append(self, seq: Sequence, lookahead: int = 0) -> bool:
        return self.blocks_for(len(seq) + lookahead) - len(seq.block_table) <= len(self.free)

    def append(self, seq: Sequence, lookahead: int = 0) -> list[int]:
        """New blocks so that seq's table covers all its tokens (after new tokens were sampled)
        plus `lookahead` draft tokens; the caller adds them to seq (Sequence.extend_blocks)."""
        missing = self.blocks_for(len(seq) + lookahead) - len(seq.block_table)
        if missing > len(self.free):
            raise RuntimeError(f"append: need {missing} free KV blocks, {len(self.free)} left")
        return [self._take_free() for _ in range(missing)]

    def commit(self, seq: Sequence) -> None:
        """Register seq's newly completed full blocks (KV computed) in the prefix cache."""
        if not self.enable_prefix_caching:
            return
        bs, table = self.block_size, seq.block_table
        start = self.num_hashed.get(seq.seq_id, 0)
        end = seq.num_computed_tokens // bs
        for i in range(start, end):
            block = table[i]
            if self.block_hash[block] is None:
                tokens = tuple(seq.token_ids[i * bs:(i + 1) * bs])
                h = self.hash_fn(self.block_hash[table[i - 1]] if i else None, tokens)
                self.block_hash[block], self.block_tokens[block] = h, tokens
                self.block_parent[block] = (table[i - 1], self.generation[table[i - 1]]) if i else None
                self.hash_to_block.setdefault(h, block)
        self.num_hashed[seq.seq_id] = max(start, end)

    def free_seq(self, seq: Sequence) -> None:
        """Drop seq's references; blocks reaching 0 join the free list (tail blocks first, so
        they are reused before the shared prefix blocks in front of them). The caller then has
        seq forget its table."""
        for block in reversed(seq.block_table):
            self.ref_counts[block] -= 1
            if self.ref_counts[block] == 0:
                self.free[block] = None
        self.num_hashed.pop(seq.seq_id, None)
