"""Inductor's FX graph cache keys, the same in every process.

The key pickles each graph input's TensorMetadata, whose memory format (torch.contiguous_format,
...) has no reducer of its own. Pickle then names it by the first module in sys.modules through
which it is reachable as `<module>.torch.contiguous_format`: a pytest process's conftest, some
torch submodule in a process started afresh. So the same graph, compiled by two processes that
imported torch in different orders, gets two keys, and the second never reads what the first
wrote (found 2026-11-27: a level-3 piece compiled in a pytest worker missed in a fresh process
with the same cache_dir). While Inductor compiles, `memory_formats_by_name` pickles a memory
format by its name in torch instead.
"""
from __future__ import annotations

import contextlib
import copyreg
from collections.abc import Iterator

import torch


def memory_format(name: str) -> torch.memory_format:
    """torch.<name>, e.g. "contiguous_format": what a memory format pickled by name reads back as."""
    found = getattr(torch, name, None)
    if not isinstance(found, torch.memory_format):
        raise ValueError(f"name: torch.{name} is not a memory format")
    return found


def _by_name(fmt: torch.memory_format) -> tuple:
    return memory_format, (str(fmt).removeprefix("torch."),)


@contextlib.contextmanager
def memory_formats_by_name() -> Iterator[None]:
    """Pickle memory formats by name (copyreg's table, which Inductor's key pickler copies) while
    the block runs; the table is as before afterwards."""
    previous = copyreg.dispatch_table.get(torch.memory_format)
    copyreg.dispatch_table[torch.memory_format] = _by_name
    try:
        yield
    finally:
        if previous is None:
            del copyreg.dispatch_table[torch.memory_format]
        else:
            copyreg.dispatch_table[torch.memory_format] = previous
