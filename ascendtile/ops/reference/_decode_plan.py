"""The gather index of a decode step over the paged cache, built once per step and shared by every
layer (the CPU path of paged_attention and of unified_attention's decode batches, and of its
batches of a few new tokens per sequence: speculative decoding's verify steps, whose query layout
and causal mask each group builds once too: QueryLayout).

Every layer of a step reads the same block table and lengths, so the cache slot of each key
position, the padding masks and the host sync on the lengths are the same in all of them:
decode_plan builds them on the first layer's call and returns the same DecodePlan to the others.
The memo is keyed on the contents of block_table and seq_lens (compared with torch.equal against
private copies, a few µs), not on tensor identity or version counters: the runtime's tensors are
inference tensors, which have no version counter, and a table mutated in place or a new tensor with
equal values must be told apart from, or matched with, the one the plan was built for. One plan per
thread (the last one built), so concurrent callers never share gather buffers; its buffers (one
step's gathered K and V, the size of the copies the layers made before) stay allocated until the
thread's next decode call builds another plan.

Sequences are padded to the longest key count of their group, not of the batch: when lengths vary
a lot, the sorted lengths are split where that saves at least MIN_SAVED_ROWS padded key rows and a
quarter of the group's rows (each group costs a few fixed small ops per layer).

Padding positions (j >= kv_len) gather the sequence's last key instead of an unused slot, which
may hold NaN: the last key is always visible to the decode query, so the padded rows are finite
whenever the output is, and the additive -inf mask gives them probability exactly 0.
"""
from __future__ import annotations

import threading

import torch

from ascendtile.ops.reference._kv_quant import slot_scales

MIN_SAVED_ROWS = 256
_local = threading.local()


class DecodeGroup:
    """Sequences rows [G] int64 of the batch (None: all of them, in order), each padded to num_k keys.
    slots [G * num_k] int64: the flat cache row ([num_blocks * block_size] rows) of key j of the
    group's i-th sequence at i * num_k + j; hidden [G, num_k] bool: j >= kv_len."""

    def __init__(self, rows: torch.Tensor | None, kv_len: torch.Tensor, slots: torch.Tensor,
                 hidden: torch.Tensor) -> None:
        self.rows, self.kv_len, self.slots, self.hidden = rows, kv_len, slots, hidden
        self.num_seqs, self.num_k = hidden.shape
        self._biases: dict[int, torch.Tensor] = {}
        self._buffers: dict[tuple, torch.Tensor] = {}
        self._queries: dict[tuple, QueryLayout] = {}

    def bias(self, window: int) -> torch.Tensor:
        """[G, 1, num_k] fp32 additive mask of the decode query (at position kv_len - 1): 0 where key j
        is visible (j < kv_len, and j > kv_len - 1 - window when window > 0), -inf elsewhere."""
        if window not in self._biases:
            hidden = self.hidden
            if window > 0:
                key_pos = torch.arange(self.num_k, device=hidden.device)
                hidden = hidden | (key_pos <= (self.kv_len - 1 - window)[:, None])
            self._biases[window] = torch.zeros(self.num_seqs, 1, self.num_k, device=hidden.device).masked_fill_(
                hidden[:, None], float("-inf"))
        return self._biases[window]

    def queries(self, q_start: torch.Tensor, q_len: torch.Tensor, window: int) -> QueryLayout:
        """The layout of the group's queries when each sequence brings q_len [G] (>= 1) new tokens
        at flat rows q_start [G] (a speculative verify step: the newest token and its drafts),
        reused by every layer while q_start and q_len are unchanged."""
        key = (window, q_start.shape[0])
        layout = self._queries.get(key)
        if layout is None or not (torch.equal(layout.q_start, q_start) and torch.equal(layout.q_len, q_len)):
            layout = self._queries[key] = QueryLayout(self, q_start.clone(), q_len.clone(), window)
        return layout

    def gather(self, cache: torch.Tensor, name: str) -> torch.Tensor:
        """[G, num_k, KVH, D] rows of cache [num_blocks, block_size, KVH, D], copied into a buffer that
        this group reuses for every layer under the same name (the previous layer's rows are dead)."""
        heads, dim = cache.shape[2:]
        key = (name, cache.dtype, heads, dim)
        if key not in self._buffers:
            self._buffers[key] = torch.empty(self.slots.numel(), heads * dim, dtype=cache.dtype, device=cache.device)
        rows = self._buffers[key]
        torch.index_select(cache.reshape(-1, heads * dim), 0, self.slots, out=rows)
        return rows.view(self.num_seqs, self.num_k, heads, dim)

    def gather_scales(self, scale_cache: torch.Tensor) -> torch.Tensor:
        """[G, num_k, KVH] scales of the gathered rows from an int8 cache's scale cache
        [num_blocks, KVH, block_size] (ops/_kv_quant.py)."""
        return slot_scales(scale_cache, self.slots).view(self.num_seqs, self.num_k, -1)


class QueryLayout:
    """A group's queries padded to its longest q_len (num_q): rows [G * num_q] int64, the flat query
    row of query i of the group's g-th sequence at g * num_q + i (padding repeats the last one);
    kept [n] int64, the padded positions holding a real query, and dest [n] int64 their flat rows;
    bias [G, 1, num_q, num_k] fp32 additive: 0 where key j is visible to query i at position
    p = kv_len - q_len + i (j <= p, and j > p - window when window > 0), -inf elsewhere (keys past
    kv_len, the gathered padding, are never visible: p < kv_len)."""

    def __init__(self, group: DecodeGroup, q_start: torch.Tensor, q_len: torch.Tensor, window: int) -> None:
        self.q_start, self.q_len = q_start, q_len
        self.num_q = num_q = int(q_len.max())
        pos = torch.arange(num_q, device=q_len.device)
        real = pos[None, :] < q_len[:, None]  # [G, num_q]
        flat = q_start[:, None] + torch.minimum(pos[None, :], (q_len - 1)[:, None])
        self.rows, self.kept = flat.flatten(), real.flatten().nonzero().flatten()
        self.dest = self.rows.index_select(0, self.kept)
        q_pos = (group.kv_len - q_len)[:, None] + pos[None, :]  # [G, num_q]
        key_pos = torch.arange(group.num_k, device=q_len.device)[None, None, :]
        hidden = key_pos > q_pos[..., None]
        if window > 0:
            hidden |= key_pos <= q_pos[..., None] - window
        self.bias = torch.zeros(hidden.shape, device=hidden.device).masked_fill_(hidden, float("-inf"))[:, None]


class DecodePlan:
    """The groups of one step, with private copies of the inputs it was built from (the memo key)."""

    def __init__(self, block_table: torch.Tensor, seq_lens: torch.Tensor, num_blocks: int, block_size: int,
                 groups: list[DecodeGroup]) -> None:
        self.block_table, self.seq_lens = block_table.clone(), seq_lens.clone()
        self.num_blocks, self.block_size, self.groups = num_blocks, block_size, groups

    def matches(self, block_table: torch.Tensor, seq_lens: torch.Tensor, num_blocks: int, block_size: int) -> bool:
        return (num_blocks == self.num_blocks and block_size == self.block_size
                and block_table.dtype == self.block_table.dtype and seq_lens.dtype == self.seq_lens.dtype
                and block_table.shape == self.block_table.shape and seq_lens.shape == self.seq_lens.shape
                and torch.equal(block_table, self.block_table) and torch.equal(seq_lens, self.seq_lens))


def split_by_length(lengths: list[int]) -> list[list[int]]:
    """Sequence indices in groups of ascending length; one group (in batch order) unless splitting
    the sorted lengths saves at least MIN_SAVED_ROWS and a quarter of a group's padded rows."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    size = [max(lengths[i], 1) for i in order]
    groups: list[list[int]] = []

    def split(lo: int, hi: int) -> None:
        whole = (hi - lo) * size[hi - 1]
        best, at = min(((i - lo) * size[i - 1] + (hi - i) * size[hi - 1], i) for i in range(lo + 1, hi)) \
            if hi - lo > 1 else (whole, lo)
        if whole - best < max(MIN_SAVED_ROWS, whole // 4):
            groups.append(order[lo:hi])
            return
        split(lo, at)
        split(at, hi)

    split(0, len(order))
    return groups if len(groups) > 1 else [list(range(len(lengths)))]


def _group(ids: torch.Tensor, kv_len: torch.Tensor, rows: torch.Tensor | None, num_blocks: int,
           block_size: int) -> DecodeGroup:
    num_k = max(int(kv_len.max()), 1)
    key_pos = torch.arange(num_k, device=kv_len.device)
    # Padding reads the last key (see the module doc); a sequence without keys reads its position 0,
    # whose clamped block id is in range, and sees nothing anyway.
    pos = torch.minimum(key_pos[None, :], (kv_len - 1).clamp(min=0)[:, None])
    slots = ids.clamp(0, num_blocks - 1).gather(1, pos // block_size) * block_size + pos % block_size
    return DecodeGroup(rows, kv_len, slots.flatten(), key_pos[None, :] >= kv_len[:, None])


def _build(block_table: torch.Tensor, seq_lens: torch.Tensor, num_blocks: int, block_size: int) -> DecodePlan | None:
    kv_len = seq_lens.long()
    lengths = kv_len.tolist()
    blocks = -(-max(max(lengths), 1) // block_size)
    if blocks > block_table.shape[1]:
        return None
    ids = block_table[:, :blocks].long()
    read = torch.arange(blocks, device=kv_len.device)[None, :] * block_size < kv_len[:, None]
    if bool((((ids < 0) | (ids >= num_blocks)) & read).any()):
        return None  # a read block id is out of range: its keys must be hidden (the general path)
    members = split_by_length(lengths)
    if len(members) == 1:
        return DecodePlan(block_table, seq_lens, num_blocks, block_size,
                          [_group(ids, kv_len, None, num_blocks, block_size)])
    groups = []
    for seqs in members:
        rows = torch.tensor(seqs, device=kv_len.device)
        groups.append(_group(ids[rows], kv_len[rows], rows, num_blocks, block_size))
    return DecodePlan(block_table, seq_lens, num_blocks, block_size, groups)


def decode_plan(block_table: torch.Tensor, seq_lens: torch.Tensor, num_blocks: int,
                block_size: int) -> DecodePlan | None:
    """The plan of block_table [B, max_blocks] (any int dtype) and seq_lens [B] (any int dtype, B >= 1)
    over a cache of num_blocks blocks of block_size; None when a block id that a sequence reads is
    outside [0, num_blocks) or the table is too short (the caller then masks per key). Reused while
    the contents of both tensors and the cache geometry are unchanged."""
    plan = getattr(_local, "plan", None)
    if plan is not None and plan.matches(block_table, seq_lens, num_blocks, block_size):
        return plan
    plan = _build(block_table, seq_lens, num_blocks, block_size)
    _local.plan = plan
    return plan
