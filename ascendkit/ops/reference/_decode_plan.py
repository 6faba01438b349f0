"""The gather index of a decode step over the paged cache, built once per step and shared by every
layer (the CPU path of paged_attention and of unified_attention's decode batches).

Every layer of a step reads the same block table and lengths, so the cache slot of each key
position, the padding mask and the host sync on the longest length are the same in all of them:
decode_plan builds them on the first layer's call and returns the same DecodePlan to the others.
The memo is keyed on the contents of block_table and seq_lens (compared with torch.equal against
private copies, a few µs), not on tensor identity or version counters: the runtime's tensors are
inference tensors, which have no version counter, and a table mutated in place or a new tensor with
equal values must be told apart from, or matched with, the one the plan was built for. One plan per
thread (the last one built), so concurrent callers never share gather buffers.

Padding positions (j >= kv_len) gather the sequence's last key instead of an unused slot, which
may hold NaN: the last key is always visible to the decode query, so the padded rows are finite
whenever the output is, and the additive -inf mask gives them probability exactly 0.
"""
from __future__ import annotations

import threading

import torch

_local = threading.local()


class DecodePlan:
    """slots [B * num_k] int64: the flat cache row ([num_blocks * block_size] rows) of key j of
    sequence b at b * num_k + j; hidden [B, num_k] bool: j >= kv_len[b]."""

    def __init__(self, block_table: torch.Tensor, seq_lens: torch.Tensor, num_blocks: int, block_size: int,
                 slots: torch.Tensor, hidden: torch.Tensor) -> None:
        self.block_table, self.seq_lens = block_table.clone(), seq_lens.clone()
        self.num_blocks, self.block_size = num_blocks, block_size
        self.slots, self.hidden = slots, hidden
        self.num_seqs, self.num_k = hidden.shape
        self._biases: dict[int, torch.Tensor] = {}
        self._buffers: dict[tuple, torch.Tensor] = {}

    def matches(self, block_table: torch.Tensor, seq_lens: torch.Tensor, num_blocks: int, block_size: int) -> bool:
        return (num_blocks == self.num_blocks and block_size == self.block_size
                and block_table.dtype == self.block_table.dtype and seq_lens.dtype == self.seq_lens.dtype
                and block_table.shape == self.block_table.shape and seq_lens.shape == self.seq_lens.shape
                and torch.equal(block_table, self.block_table) and torch.equal(seq_lens, self.seq_lens))

    def bias(self, window: int) -> torch.Tensor:
        """[B, 1, num_k] fp32 additive mask of the decode query (at position kv_len - 1): 0 where key j
        is visible (j < kv_len, and j > kv_len - 1 - window when window > 0), -inf elsewhere."""
        if window not in self._biases:
            hidden = self.hidden
            if window > 0:
                kv_len = self.seq_lens.long()
                hidden = hidden | (torch.arange(self.num_k) <= (kv_len - 1 - window)[:, None])
            bias = torch.zeros(self.num_seqs, 1, self.num_k).masked_fill_(hidden[:, None], float("-inf"))
            self._biases[window] = bias
        return self._biases[window]

    def gather(self, cache: torch.Tensor, name: str) -> torch.Tensor:
        """[B, num_k, KVH, D] rows of cache [num_blocks, block_size, KVH, D], copied into a buffer that
        this plan reuses for every layer under the same name (the previous layer's rows are dead)."""
        heads, dim = cache.shape[2:]
        key = (name, cache.dtype, heads, dim)
        if key not in self._buffers:
            self._buffers[key] = torch.empty(self.slots.numel(), heads * dim, dtype=cache.dtype)
        rows = self._buffers[key]
        torch.index_select(cache.reshape(-1, heads * dim), 0, self.slots, out=rows)
        return rows.view(self.num_seqs, self.num_k, heads, dim)


def _build(block_table: torch.Tensor, seq_lens: torch.Tensor, num_blocks: int, block_size: int) -> DecodePlan | None:
    kv_len = seq_lens.long()
    num_k = max(int(kv_len.max()), 1)
    blocks = -(-num_k // block_size)
    if blocks > block_table.shape[1]:
        return None
    ids = block_table[:, :blocks].long()
    read = torch.arange(blocks)[None, :] * block_size < kv_len[:, None]
    if bool((((ids < 0) | (ids >= num_blocks)) & read).any()):
        return None  # a read block id is out of range: its keys must be hidden (the general path)
    key_pos = torch.arange(num_k)
    hidden = key_pos[None, :] >= kv_len[:, None]
    # Padding reads the last key (see the module doc); a sequence without keys reads its position 0,
    # whose clamped block id is in range, and sees nothing anyway.
    pos = torch.minimum(key_pos[None, :], (kv_len - 1).clamp(min=0)[:, None])
    slots = ids.clamp(0, num_blocks - 1).gather(1, pos // block_size) * block_size + pos % block_size
    return DecodePlan(block_table, seq_lens, num_blocks, block_size, slots.flatten(), hidden)


def decode_plan(block_table: torch.Tensor, seq_lens: torch.Tensor, num_blocks: int,
                block_size: int) -> DecodePlan | None:
    """The plan of block_table [B, max_blocks] (any int dtype) and seq_lens [B] (any int dtype) over a
    cache of num_blocks blocks of block_size; None when a block id that a sequence reads is outside
    [0, num_blocks) or the table is too short (the caller then masks per key). Reused while the
    contents of both tensors and the cache geometry are unchanged."""
    plan = getattr(_local, "plan", None)
    if plan is not None and plan.matches(block_table, seq_lens, num_blocks, block_size):
        return plan
    plan = _build(block_table, seq_lens, num_blocks, block_size)
    _local.plan = plan
    return plan
