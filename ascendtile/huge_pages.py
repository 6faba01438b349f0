"""CPU tensors' memory on 2 MiB transparent huge pages (Linux). A decode step reads every weight and
the KV cache it attends over; with 4 KiB pages such a stream crosses a page every 4 KiB, and a
crossing that misses the TLB walks the page tables (in a virtual machine, the host's as well). On huge pages the same reads
ran faster: SmolLM2's 121 one-row fp32 products 26.3 against 37.3 ms, 32 rows 56.2 against
75.0 ms, and in the model a single-stream fp32 decode step 35.8 against 39.9 ms (medians of
alternated rounds, 2 threads, Intel Xeon KVM guest with AMX; bench/results/2026-11-30-huge-pages.md).

`back_with_huge_pages` asks Linux, with madvise, for huge pages under the 2 MiB-aligned blocks that
hold the tensors: MADV_HUGEPAGE, so memory not yet written faults in as huge pages, then (with
`collapse`) MADV_COLLAPSE (Linux 6.1+), which copies a block already written onto a huge page in
place. No tensor moves or changes: aliases, oneDNN packs and compiled graphs over them stay valid.
A block is asked for only inside private anonymous memory (the heap included) and may hold a
tensor's neighbours, which gain the same way. Where transparent huge pages are off ("never"), the
tensors are not CPU ones, or the OS is not Linux, it does nothing.
"""
from __future__ import annotations

import bisect
import ctypes
import ctypes.util
import errno
import functools
import sys
from pathlib import Path
from typing import Iterable

import torch

HUGE_PAGE = 2 << 20
MADV_HUGEPAGE = 14
MADV_COLLAPSE = 25
THP_SETTING = Path("/sys/kernel/mm/transparent_hugepage/enabled")

advised_bytes = 0  # blocks given MADV_HUGEPAGE (what later faults there get)
collapsed_bytes = 0  # of those, blocks MADV_COLLAPSE put on huge pages


@functools.lru_cache(maxsize=None)
def _madvise():
    """libc's madvise, or None where there is no Linux THP to ask for."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        if "[never]" in THP_SETTING.read_text():
            return None
    except OSError:  # a kernel built without transparent huge pages
        return None
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    libc.madvise.restype = ctypes.c_int
    return libc.madvise


def _anonymous_mappings() -> list[tuple[int, int]]:
    """This process's private, writable anonymous memory (the heap included) as sorted (start, end)
    ranges, mappings that touch joined: advice splits a mapping where its flags change, and a
    storage may straddle such a split."""
    found: list[tuple[int, int]] = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            if fields[1][:2] != "rw" or fields[1][3] != "p" or (len(fields) > 5 and fields[5] != "[heap]"):
                continue
            start, end = (int(v, 16) for v in fields[0].split("-"))
            if found and found[-1][1] == start:
                found[-1] = (found[-1][0], end)
            else:
                found.append((start, end))
    return found


def _in_cpu_memory(tensor: torch.Tensor) -> bool:
    """Whether the tensor has a non-empty storage in this process's memory."""
    return (tensor.device.type == "cpu" and tensor.layout == torch.strided and not tensor.is_mkldnn
            and tensor.untyped_storage().nbytes() > 0)


def huge_page_blocks(tensors: Iterable[torch.Tensor], mappings: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The merged (start, end) ranges of whole 2 MiB blocks that cover the tensors' storages, each
    kept inside the anonymous mapping that holds its storage; storages outside them are left out."""
    starts = [start for start, _ in mappings]
    blocks = []
    for tensor in filter(_in_cpu_memory, tensors):
        storage = tensor.untyped_storage()
        begin, size = storage.data_ptr(), storage.nbytes()
        index = bisect.bisect_right(starts, begin) - 1
        if index < 0 or begin + size > mappings[index][1]:
            continue
        low, high = mappings[index]
        first = max(begin // HUGE_PAGE * HUGE_PAGE, -(-low // HUGE_PAGE) * HUGE_PAGE)
        last = min(-(-(begin + size) // HUGE_PAGE) * HUGE_PAGE, high // HUGE_PAGE * HUGE_PAGE)
        if last > first:
            blocks.append((first, last))
    merged: list[tuple[int, int]] = []
    for first, last in sorted(blocks):
        if merged and first <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(last, merged[-1][1]))
        else:
            merged.append((first, last))
    return merged


def _blocks(tensors: Iterable[torch.Tensor]) -> list[tuple[int, int]]:
    """huge_page_blocks over this process's anonymous mappings; [] without reading /proc/self/maps
    where there is nothing to ask for (no THP, or no CPU storage: a cache freed, an NPU model)."""
    tensors = [tensor for tensor in tensors if _in_cpu_memory(tensor)]
    if _madvise() is None or not tensors:
        return []
    return huge_page_blocks(tensors, _anonymous_mappings())


def _advise(blocks: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """MADV_HUGEPAGE on each block; the blocks Linux took it for."""
    global advised_bytes
    madvise = _madvise()
    advised = [(first, last) for first, last in blocks if madvise(first, last - first, MADV_HUGEPAGE) == 0]
    advised_bytes += sum(last - first for first, last in advised)
    return advised


def _collapse(blocks: list[tuple[int, int]]) -> int:
    """MADV_COLLAPSE on each block until the kernel says it has none (EINVAL: the advice stays);
    the bytes it put on huge pages."""
    global collapsed_bytes
    madvise = _madvise()
    done = 0
    for first, last in blocks:
        if madvise(first, last - first, MADV_COLLAPSE) == 0:
            done += last - first
        elif ctypes.get_errno() == errno.EINVAL:  # no MADV_COLLAPSE in this kernel
            break
    collapsed_bytes += done
    return done


def back_with_huge_pages(tensors: Iterable[torch.Tensor], collapse: bool = True) -> int:
    """Ask for huge pages under the CPU tensors' memory (see the module's docstring); collapse:
    also put the memory already written on them now. Returns the bytes now on huge pages by
    MADV_COLLAPSE (0 without collapse, or where the kernel refused it: EINVAL before Linux 6.1,
    EAGAIN / ENOMEM when no huge page was free, in which case khugepaged may collapse them later)."""
    advised = _advise(_blocks(tensors))
    return _collapse(advised) if collapse else 0


def huge_page_zeros(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
    """torch.zeros(shape, dtype, device), a CPU tensor's blocks asked for huge pages before the zeros
    are written, so fresh memory faults in as huge pages (a KV cache); memory the allocator hands
    back already written (glibc serves allocations below its raised mmap threshold, up to 32 MiB,
    from freed heap) keeps its 4 KiB pages until the collapse of the same blocks after the zeros."""
    tensor = torch.empty(shape, dtype=dtype, device=device)
    advised = _advise(_blocks([tensor]))
    tensor.zero_()
    _collapse(advised)
    return tensor


def process_huge_page_bytes() -> int:
    """This process's anonymous memory on transparent huge pages, as Linux counts it (AnonHugePages
    of /proc/self/smaps_rollup); 0 where there is no such file."""
    try:
        with open("/proc/self/smaps_rollup") as rollup:
            return next((int(line.split()[1]) * 1024 for line in rollup if line.startswith("AnonHugePages:")), 0)
    except OSError:
        return 0
