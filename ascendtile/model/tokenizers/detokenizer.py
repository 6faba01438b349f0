"""Incremental detokenization: feed generated ids one at a time, get only the new text.

Decoding single tokens in isolation breaks multi-byte UTF-8 characters split across tokens and
the spacing rules of some decoders. So each step decodes a short window ids[prefix:] and
compares with ids[prefix:read]; text is released only once it no longer ends in an incomplete
character (U+FFFD), and the window then slides forward.
"""
from __future__ import annotations

from typing import Iterable

_CONTEXT = 5  # prompt tokens kept as decoding context (leading-space handling of the first token)


class IncrementalDetokenizer:
    def __init__(self, tokenizer, prompt_ids: Iterable[int] = (), skip_special_tokens: bool = True) -> None:
        self.tokenizer, self.skip_special_tokens = tokenizer, skip_special_tokens
        self.ids = list(prompt_ids)
        self.read_offset = len(self.ids)
        self.prefix_offset = max(self.read_offset - _CONTEXT, 0)
        self.text = ""  # everything emitted so far

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens)

    def feed(self, token_id: int) -> str:
        """Append one id; return the text it completes ("" while a character is still partial)."""
        self.ids.append(int(token_id))
        prefix = self._decode(self.ids[self.prefix_offset: self.read_offset])
        full = self._decode(self.ids[self.prefix_offset:])
        if len(full) <= len(prefix) or full.endswith("\ufffd"):
            return ""
        delta = full[len(prefix):]
        self.prefix_offset, self.read_offset = self.read_offset, len(self.ids)
        self.text += delta
        return delta
