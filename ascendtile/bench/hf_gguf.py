"""HF transformers' own loading of a GGUF (the independent reference for our loader), with its
repeated work done once. transformers builds a fresh `gguf.GGUFReader` for the config, again for
the weights and again for the tokenizer; each parse slices the file's np.memmap once per element
of every metadata array (Gemma 3's vocabulary has 262k entries). Inside `gguf_parsed_once()` a
path is parsed once, over a plain ndarray view of the mapping, and the reader shared: transformers
only reads it. Its weight-name mapping walks the model's module tree and builds gguf's
`TensorNameMap` for every module it visits, each one the same table of every layer's names; inside
`gguf_name_maps_shared()` one map per (architecture, layer count) serves them all (transformers
only looks names up in it). On the 2-core AVX2 EPYC of 2026-11-28, `hf_from_gguf` took 22.8 ->
10.6 s for SmolLM2 (transformers' import included) and 45.9 -> 23.2 s for Gemma 3 270M."""
from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch


@contextmanager
def gguf_parsed_once() -> Iterator[None]:
    """Within the block, `gguf.GGUFReader(path)` in read mode returns one reader per file (keyed
    by its real path, size and mtime, so a rewritten file is parsed anew), a PlainArrayReader."""
    import gguf

    original = gguf.GGUFReader
    readers: dict[tuple[str, int, int], object] = {}

    class PlainArrayReader(gguf.gguf_reader.GGUFReader):
        """The reader over a plain ndarray view of its file's mapping: the parse slices the file
        once per element of every metadata array, and a slice of an np.memmap is a new memmap
        object, several times the cost of an ndarray slice (the view keeps the mapping alive)."""

        @property
        def data(self):
            return self._file

        @data.setter
        def data(self, mapping):
            self._file = mapping.view(np.ndarray)

    def shared_reader(path, mode="r"):
        if mode != "r":
            return original(path, mode)
        stat = os.stat(path)
        key = (os.path.realpath(path), stat.st_size, stat.st_mtime_ns)
        if key not in readers:
            readers[key] = PlainArrayReader(path, mode)
        return readers[key]

    gguf.GGUFReader = shared_reader
    try:
        yield
    finally:
        gguf.GGUFReader = original


@contextmanager
def gguf_name_maps_shared() -> Iterator[None]:
    """Within the block, `gguf.get_tensor_name_map(arch, n_blocks)` builds one map per arguments."""
    import gguf

    original = gguf.get_tensor_name_map
    gguf.get_tensor_name_map = functools.cache(original)
    try:
        yield
    finally:
        gguf.get_tensor_name_map = original


def hf_from_gguf(gguf_path: Path, dtype: torch.dtype = torch.float32, tokenizer: bool = True):
    """(model, tokenizer) as transformers loads them from gguf_path (tokenizer None unless asked),
    the model in eval mode and `dtype`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf_path = Path(gguf_path)
    with gguf_parsed_once(), gguf_name_maps_shared():
        model = AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name, dtype=dtype).eval()
        tok = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name) if tokenizer else None
    return model, tok
