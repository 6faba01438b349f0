"""HF transformers' own loading of a GGUF (the independent reference for our loader), with its
metadata parsed once. transformers builds a fresh `gguf.GGUFReader` for the config, again for
the weights and again for the tokenizer; each parse makes numpy views of every element of every
metadata array (~23 s for Gemma 3's 262k-entry vocabulary on a 2-core CPU). Inside
`gguf_parsed_once()` a path is parsed once and the reader shared: transformers only reads it."""
from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch


@contextmanager
def gguf_parsed_once() -> Iterator[None]:
    """Within the block, `gguf.GGUFReader(path)` in read mode returns one reader per file (keyed
    by its real path, size and mtime, so a rewritten file is parsed anew)."""
    import gguf

    original = gguf.GGUFReader
    readers: dict[tuple[str, int, int], object] = {}

    def shared_reader(path, mode="r"):
        if mode != "r":
            return original(path, mode)
        stat = os.stat(path)
        key = (os.path.realpath(path), stat.st_size, stat.st_mtime_ns)
        if key not in readers:
            readers[key] = original(path, mode)
        return readers[key]

    gguf.GGUFReader = shared_reader
    try:
        yield
    finally:
        gguf.GGUFReader = original


def hf_from_gguf(gguf_path: Path, dtype: torch.dtype = torch.float32, tokenizer: bool = True):
    """(model, tokenizer) as transformers loads them from gguf_path (tokenizer None unless asked),
    the model in eval mode and `dtype`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf_path = Path(gguf_path)
    with gguf_parsed_once():
        model = AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name, dtype=dtype).eval()
        tok = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name) if tokenizer else None
    return model, tok
