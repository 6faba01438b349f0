"""Rebuild a `tokenizers` backend from a GGUF file's tokenizer.ggml.* metadata.

Two tokenizer models are supported, each giving the ids HF transformers gives for the same file:
- "gpt2": byte-level BPE (SmolLM2, Llama 3, Qwen): vocab + merges from the file; a token written
  as raw UTF-8 instead of in the byte alphabet is respelled byte by byte.
- "llama": SentencePiece-style BPE (Gemma 3): pieces spell spaces as "▁", unknown characters fall
  back to <0xNN> byte tokens. Gemma files list no merges, so they are derived from the vocabulary:
  every split of a piece into two pieces that are both in the vocabulary is a merge, ranked by
  the position of the merged piece in the file (earlier = merged first; Gemma's scores do not
  follow merge order), then by the longer left part. Pieces made only of spaces are stored with
  real spaces and are respelled with "▁" so the merges that build them match.
Tokens typed CONTROL become special tokens (kept whole, skipped on decode); USER_DEFINED tokens
(e.g. Gemma's runs of newlines) are added tokens matched whole in the text.
"""
from __future__ import annotations

from typing import Any

from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

CONTROL, USER_DEFINED = 3, 4  # llama.cpp token types
SPACE_PIECE = "\u2581"  # SentencePiece's visible space "▁"


def build_backend(metadata: dict[str, Any], source: str) -> Tokenizer:
    """The backend (model, normalizer, pre-tokenizer, decoder, special tokens, BOS rule)."""
    kind = metadata.get("tokenizer.ggml.model")
    if kind not in _BUILDERS:
        raise ValueError(f"{source}: GGUF tokenizer model {kind!r} is not supported (supported: {sorted(_BUILDERS)})")
    tokens = list(metadata["tokenizer.ggml.tokens"])
    try:
        backend = _BUILDERS[kind](tokens, metadata)
    except Exception as exc:  # tokenizers raises a bare Exception on an inconsistent vocab/merges
        raise ValueError(f"{source}: tokenizer metadata is inconsistent ({exc})") from exc
    _add_typed_tokens(backend, tokens, metadata.get("tokenizer.ggml.token_type") or [], byte_level=kind == "gpt2")
    bos_id = metadata.get("tokenizer.ggml.bos_token_id")
    if metadata.get("tokenizer.ggml.add_bos_token") and bos_id is not None:
        bos = tokens[bos_id]
        backend.post_processor = processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A $B",
                                                               special_tokens=[(bos, bos_id)])
    return backend


def _byte_alphabet() -> dict[int, str]:
    """GPT-2's byte -> printable character table: printable Latin-1 bytes stand for themselves,
    the other 68 bytes take the code points from U+0100 on, in byte order."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("\u00a1"), ord("\u00ac") + 1), *range(ord("\u00ae"), 256)]
    table, extra = {b: chr(b) for b in keep}, 0
    for b in range(256):
        if b not in table:
            table[b], extra = chr(256 + extra), extra + 1
    return table


_BYTE_CHARS = _byte_alphabet()
_BYTE_ALPHABET = frozenset(_BYTE_CHARS.values())


def _byte_spelling(token: str) -> str:
    """A token as the byte-level model spells it: already spelled ones unchanged, any other (a
    raw UTF-8 string some converters write) respelled byte by byte."""
    if _BYTE_ALPHABET.issuperset(token):
        return token
    return "".join(_BYTE_CHARS[b] for b in token.encode("utf-8"))


def _byte_level_bpe(tokens: list[str], metadata: dict[str, Any]) -> Tokenizer:
    merges = [tuple(m.split(" ", 1)) for m in metadata["tokenizer.ggml.merges"]]
    vocab = {_byte_spelling(t): i for i, t in enumerate(tokens)}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    return backend


def _sentencepiece_bpe(tokens: list[str], metadata: dict[str, Any]) -> Tokenizer:
    if metadata.get("tokenizer.ggml.add_space_prefix", False):
        raise ValueError("tokenizer.ggml.add_space_prefix = true is not supported (Gemma files set it false)")
    pieces = [SPACE_PIECE * len(t) if t and not t.strip(" ") else t for t in tokens]
    vocab = {piece: i for i, piece in enumerate(pieces)}  # a repeated piece keeps its last id
    merges = [tuple(m.split(" ", 1)) for m in metadata["tokenizer.ggml.merges"]] \
        if "tokenizer.ggml.merges" in metadata else derive_merges(vocab)
    unk_id = metadata.get("tokenizer.ggml.unknown_token_id")
    backend = Tokenizer(models.BPE(vocab=vocab, merges=merges, byte_fallback=True, fuse_unk=True,
                                   unk_token=pieces[unk_id] if unk_id is not None else None))
    backend.normalizer = normalizers.Replace(" ", SPACE_PIECE)
    backend.decoder = decoders.Sequence([decoders.Replace(SPACE_PIECE, " "), decoders.ByteFallback(), decoders.Fuse()])
    return backend


def derive_merges(vocab: dict[str, int]) -> list[tuple[str, str]]:
    """Every (left, right) split of a vocabulary piece into two vocabulary pieces, ranked by the
    merged piece's id, then by the longer left part first."""
    ranked = []
    for piece, rank in vocab.items():
        for cut in range(len(piece) - 1, 0, -1):
            left, right = piece[:cut], piece[cut:]
            if left in vocab and right in vocab:
                ranked.append((rank, -cut, left, right))
    ranked.sort()
    return [(left, right) for _, _, left, right in ranked]


def _add_typed_tokens(backend: Tokenizer, tokens: list[str], types: list[int], byte_level: bool) -> None:
    """CONTROL tokens -> special added tokens; USER_DEFINED ones -> plain added tokens (matched
    whole, kept on decode). In a byte-level vocabulary a CONTROL token spelled outside the byte
    alphabet is a converter mislabel; adding it would grow the vocabulary, so it is skipped (as HF)."""
    vocab = backend.get_vocab()
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False)
                                for t, kind in zip(tokens, types)
                                if kind == CONTROL and (not byte_level or _BYTE_ALPHABET.issuperset(t))])
    backend.add_tokens([AddedToken(t, special=False, normalized=False)
                        for t, kind in zip(tokens, types) if kind == USER_DEFINED and t in vocab])


_BUILDERS = {"gpt2": _byte_level_bpe, "llama": _sentencepiece_bpe}
