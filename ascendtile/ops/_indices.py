"""The opt-in host check of index ranges (ASCENDTILE_CHECK_INDICES=1).

Kernels and references never trust an index: a slot, block id or position outside its range is
skipped (see docs/ascend-kernel-rules.md, "Index safety"). That keeps bad indices from touching
memory, but hides the caller's bug. With ASCENDTILE_CHECK_INDICES=1 the op validators also read
the indices back to the host on every device and raise ValueError naming the argument and the
first offending value. Reading them syncs the device (and cannot run inside a captured graph),
hence a debug switch, read on every call so a test can toggle it with monkeypatch.
"""
from __future__ import annotations

import os

import torch

ENV = "ASCENDTILE_CHECK_INDICES"


def checking() -> bool:
    """Whether ASCENDTILE_CHECK_INDICES=1 (read at call time)."""
    return os.environ.get(ENV, "0") == "1"


def has_values(t: torch.Tensor) -> bool:
    """Real values exist (not a fake or meta tensor, as under torch.compile tracing)."""
    return t.device.type != "meta" and not torch._subclasses.fake_tensor.is_fake(t)


def checkable(t: torch.Tensor) -> bool:
    """Values to check without a device sync (CPU), or with the sync the debug switch allows."""
    return has_values(t) and (t.device.type == "cpu" or checking())


def _first_bad(name: str, values: torch.Tensor, bad: torch.Tensor, allowed: str) -> None:
    if bool(bad.any()):
        where = tuple(int(i) for i in bad.nonzero()[0])
        index = where[0] if len(where) == 1 else list(where)
        raise ValueError(f"{name}: entry {index} is {int(values[where])}, outside {allowed} "
                         f"({ENV}=1 checks index ranges)")


def check_slots(name: str, slot_mapping: torch.Tensor, num_blocks: int, block_size: int) -> None:
    """Every slot is -1 (padding) or in [0, num_blocks · block_size)."""
    if checking() and has_values(slot_mapping) and slot_mapping.numel():
        slots = num_blocks * block_size
        bad = ((slot_mapping < 0) & (slot_mapping != -1)) | (slot_mapping >= slots)
        _first_bad(name, slot_mapping, bad, f"[0, {slots}) (num_blocks {num_blocks} × block_size {block_size}) or -1")


def check_block_table(name: str, table: torch.Tensor, num_blocks: int, block_size: int, lens: torch.Tensor) -> None:
    """Every entry a sequence reads (column j < ceil(lens[b] / block_size)) is in [0, num_blocks);
    entries past a sequence's length (-1 padding) are never read and may hold anything."""
    if checking() and has_values(table) and has_values(lens) and table.numel():
        cols = torch.arange(table.shape[1], device=table.device)
        read = cols[None, :] * block_size < lens[:, None].to(table.device)
        bad = read & ((table < 0) | (table >= num_blocks))
        _first_bad(name, table, bad, f"[0, {num_blocks}) (num_blocks) within the sequence's length")


def check_positions(name: str, positions: torch.Tensor, rows: int) -> None:
    """Every position is in [0, rows) (the cos/sin cache's rows)."""
    if checking() and has_values(positions) and positions.numel():
        _first_bad(name, positions, (positions < 0) | (positions >= rows), f"[0, {rows}) (cos_sin_cache rows)")


def check_lengths(name: str, lens: torch.Tensor, capacity: int, table_name: str) -> None:
    """Every KV length is in [0, capacity] (the block table's columns × block size): always where
    reading them costs no device sync (CPU), on devices only with the switch on."""
    if checkable(lens) and lens.numel():
        # One aminmax instead of two compares, an and, an all (16 -> 5 us per call; every layer, every step).
        low, high = (int(v) for v in torch.aminmax(lens))
        if low < 0 or high > capacity:
            raise ValueError(f"{name}: every length must be in [0, {capacity}] ({table_name} capacity), "
                             f"got min {low}, max {high}")
