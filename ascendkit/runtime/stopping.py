"""Stop conditions, checked after each new token: stop token ids, EOS (unless ignore_eos), stop
strings (incremental detokenization, the stop string is cut from the text), and length."""
from __future__ import annotations

from ascendkit.model.tokenizers.detokenizer import IncrementalDetokenizer
from ascendkit.runtime.sequence import Sequence


class StopChecker:
    def __init__(self, tokenizer, eos_token_ids: set[int]) -> None:
        self.tokenizer, self.eos_token_ids = tokenizer, set(eos_token_ids)
        self.detokenizers: dict[int, IncrementalDetokenizer] = {}

    def start(self, seq: Sequence) -> None:
        if seq.params.stop:
            if self.tokenizer is None:
                raise ValueError("stop: stop strings need a tokenizer; this model has none")
            self.detokenizers[seq.seq_id] = IncrementalDetokenizer(self.tokenizer, seq.prompt_token_ids)

    def append(self, seq: Sequence, token: int) -> bool:
        """Add a sampled token to seq; finish it (and return True) if a stop condition holds."""
        seq.token_ids.append(token)
        params = seq.params
        if token in params.stop_token_ids:
            seq.finish("stop", stop_reason=token)
        elif not params.ignore_eos and token in self.eos_token_ids:
            seq.finish("stop")
        elif seq.seq_id in self.detokenizers:
            self._check_strings(seq, token)
        if not seq.is_finished and len(seq) >= seq.max_len:
            seq.finish("length")
        if seq.is_finished:
            self._finalize_text(seq)
        return seq.is_finished

    def _check_strings(self, seq: Sequence, token: int) -> None:
        detok = self.detokenizers[seq.seq_id]
        before = len(detok.text)
        if not detok.feed(token):
            return
        text = detok.text
        found = []
        for stop in seq.params.stop:
            at = text.find(stop, max(0, before - len(stop) + 1))
            if at >= 0:
                found.append((at, stop))
        if found:
            at, stop = min(found)
            seq.text = text[:at]
            seq.finish("stop", stop_reason=stop)

    def _finalize_text(self, seq: Sequence) -> None:
        self.detokenizers.pop(seq.seq_id, None)
        if isinstance(seq.stop_reason, str):
            return  # text already cut at the stop string
        if self.tokenizer is None:
            return
        ids = seq.output_token_ids
        if seq.finish_reason == "stop":  # a stop token / EOS ends generation but is not text
            ids = ids[:-1]
        seq.text = self.tokenizer.decode(ids)
