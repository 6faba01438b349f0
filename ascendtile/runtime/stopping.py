"""Stop conditions, checked after each new token: stop token ids, EOS (unless ignore_eos), stop
strings (incremental detokenization, the stop string is cut from the text), and length.

The StopChecker only reads sequences: check() returns a Stop (why, and the completion's text)
and the engine finishes the sequence with it (Sequence.finish). Its own state is one incremental
detokenizer per sequence that watches stop strings, dropped when that sequence stops.
"""
from __future__ import annotations

from dataclasses import dataclass

from ascendtile.model import IncrementalDetokenizer
from ascendtile.runtime.sequence import Sequence


@dataclass
class Stop:
    reason: str  # "stop" | "length"
    stop_reason: str | int | None = None  # the stop string or stop token id; None for EOS / length
    text: str | None = None  # the completion's text; None without a tokenizer


class StopChecker:
    def __init__(self, tokenizer, eos_token_ids: set[int]) -> None:
        self.tokenizer, self.eos_token_ids = tokenizer, set(eos_token_ids)
        self.detokenizers: dict[int, IncrementalDetokenizer] = {}

    def start(self, seq: Sequence) -> None:
        if seq.params.stop:  # LLM.generate refuses stop strings without a tokenizer
            self.detokenizers[seq.seq_id] = IncrementalDetokenizer(self.tokenizer, seq.prompt_token_ids)

    def check(self, seq: Sequence) -> Stop | None:
        """After seq's newest token was appended: the Stop that ends it, or None to go on."""
        token, params = seq.last_token, seq.params
        stop = None
        if token in params.stop_token_ids:
            stop = Stop("stop", token)
        elif not params.ignore_eos and token in self.eos_token_ids:
            stop = Stop("stop")
        elif seq.seq_id in self.detokenizers:
            stop = self._check_strings(seq, token)
        if stop is None and len(seq) >= seq.max_len:
            stop = Stop("length")
        if stop is not None:
            self.detokenizers.pop(seq.seq_id, None)
            if stop.text is None:
                stop.text = self._text(seq, stop)
        return stop

    def _check_strings(self, seq: Sequence, token: int) -> Stop | None:
        detok = self.detokenizers[seq.seq_id]
        before = len(detok.text)
        if not detok.feed(token):
            return None
        text = detok.text
        found = []
        for stop in seq.params.stop:
            at = text.find(stop, max(0, before - len(stop) + 1))
            if at >= 0:
                found.append((at, stop))
        if not found:
            return None
        at, stop = min(found)
        return Stop("stop", stop, text[:at])  # the text is cut at the stop string

    def _text(self, seq: Sequence, stop: Stop) -> str | None:
        if self.tokenizer is None:
            return None
        ids = seq.output_token_ids
        if stop.reason == "stop":  # a stop token / EOS ends generation but is not text
            ids = ids[:-1]
        return self.tokenizer.decode(ids)
