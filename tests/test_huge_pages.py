"""huge_pages: which 2 MiB blocks are asked for, that the memory really lands on huge pages (read
back from /proc/self/smaps, not from the module's own counters), that no value changes, and that
nothing is asked where transparent huge pages are off or MADV_COLLAPSE is missing."""
import ctypes
import errno
import platform
import re

import numpy as np
import pytest
import torch

import ascendtile.huge_pages as hp
from smaps import mapping_of, needs_thp

MIB = 1 << 20
HUGE = hp.HUGE_PAGE


def linux_release() -> tuple[int, int]:
    found = re.match(r"(\d+)\.(\d+)", platform.release())
    return (int(found[1]), int(found[2])) if found else (0, 0)


def test_blocks_cover_each_storage_inside_its_mapping_only():
    data = torch.empty(8 * MIB, dtype=torch.uint8)
    base = data.untyped_storage().data_ptr()
    low = base // HUGE * HUGE
    whole = [(low - 4 * HUGE, low + 12 * HUGE)]
    # the mapping holds the whole storage: every block the storage touches, rounded outward
    first, last = base // HUGE * HUGE, -(-(base + 8 * MIB) // HUGE) * HUGE
    assert hp.huge_page_blocks([data], whole) == [(first, last)]
    # a mapping that starts inside the storage's first block: the blocks start at the mapping's
    # first block boundary
    clipped = [(base - 1, base + 8 * MIB + 1)]
    assert hp.huge_page_blocks([data], clipped)[0][0] == -(-(base - 1) // HUGE) * HUGE
    # a storage outside every mapping, or running past its mapping's end, is left out
    assert hp.huge_page_blocks([data], [(low - 8 * HUGE, low - 4 * HUGE)]) == []
    assert hp.huge_page_blocks([data], [(base, base + MIB)]) == []
    # views share their storage: one range
    assert hp.huge_page_blocks([data[1:], data[:5]], whole) == [(first, last)]
    # neither a meta tensor nor an empty one asks for anything
    assert hp.huge_page_blocks([torch.empty(4 * MIB, device="meta"), torch.empty(0)], whole) == []


def test_storages_in_one_block_merge_and_distant_ones_do_not():
    buffer = np.empty(16 * MIB, dtype=np.uint8)
    base = buffer.ctypes.data
    skip = -base % HUGE  # the first block boundary inside the buffer
    left = torch.frombuffer(buffer[skip:skip + HUGE + 100], dtype=torch.uint8)  # ends 100 bytes into block 2
    right = torch.frombuffer(buffer[skip + HUGE + 200:skip + 2 * HUGE], dtype=torch.uint8)  # inside block 2
    far = torch.frombuffer(buffer[skip + 4 * HUGE:skip + 5 * HUGE], dtype=torch.uint8)  # block 5 exactly
    mapping = [(base, base + 16 * MIB)]
    start = base + skip
    assert hp.huge_page_blocks([far, right, left], mapping) == [(start, start + 2 * HUGE),
                                                                (start + 4 * HUGE, start + 5 * HUGE)]


@needs_thp
def test_written_memory_collapses_onto_huge_pages_and_keeps_its_values():
    tensor = torch.randn(6 * MIB)  # 24 MiB, written before any advice
    expected = tensor.clone()
    before = hp.collapsed_bytes
    done = hp.back_with_huge_pages([tensor[::3]])  # a strided view asks for its whole storage
    if done == 0 and linux_release() < (6, 1):
        pytest.skip(f"Linux {platform.release()} has no MADV_COLLAPSE (6.1+)")
    assert done >= 24 * MIB - 2 * HUGE and hp.collapsed_bytes - before == done
    mapping = mapping_of(tensor)
    assert mapping["advised"] and mapping["huge"] >= 24 * MIB - 2 * HUGE
    assert torch.equal(tensor, expected)


@needs_thp
def test_huge_page_zeros_fault_in_as_huge_pages():
    cache = hp.huge_page_zeros((512, 16, 8, 128), torch.bfloat16, "cpu")  # 16 MiB, a KV cache's shape
    assert cache.shape == (512, 16, 8, 128) and cache.dtype == torch.bfloat16 and not cache.any()
    mapping = mapping_of(cache)
    assert mapping["advised"] and mapping["huge"] >= 16 * MIB - 2 * HUGE


def test_nothing_is_asked_where_huge_pages_are_off(tmp_path, monkeypatch):
    setting = tmp_path / "enabled"
    setting.write_text("always madvise [never]\n")
    monkeypatch.setattr(hp, "THP_SETTING", setting)
    hp._madvise.cache_clear()
    try:
        tensor = torch.randn(MIB * 2)
        before = (hp.advised_bytes, hp.collapsed_bytes)
        assert hp.back_with_huge_pages([tensor]) == 0
        assert (hp.advised_bytes, hp.collapsed_bytes) == before
    finally:
        hp._madvise.cache_clear()


def test_without_madv_collapse_the_advice_stays_and_collapse_stops(monkeypatch):
    calls = []

    def madvise(address, length, advice):
        calls.append(advice)
        if advice == hp.MADV_COLLAPSE:
            ctypes.set_errno(errno.EINVAL)  # a kernel before 6.1
            return -1
        return 0

    monkeypatch.setattr(hp, "_madvise", lambda: madvise)
    tensors = [torch.randn(2 * MIB) for _ in range(3)]  # 8 MiB each
    blocks = hp.huge_page_blocks(tensors, hp._anonymous_mappings())
    advised = hp.advised_bytes
    assert hp.back_with_huge_pages(tensors) == 0
    assert calls.count(hp.MADV_HUGEPAGE) == len(blocks) and calls.count(hp.MADV_COLLAPSE) == 1
    assert hp.advised_bytes - advised == sum(last - first for first, last in blocks)
