"""Tokenizer on the `tokenizers` package: from an HF directory (tokenizer.json +
tokenizer_config.json) or rebuilt from GGUF metadata (tokenizers/gguf.py: byte-level BPE or
SentencePiece BPE, special tokens, chat template). Chat templates render with jinja2 the way
HF's apply_chat_template does.
"""
from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer as _Backend

from ascendtile.model.tokenizers.detokenizer import IncrementalDetokenizer
from ascendtile.model.tokenizers.gguf import build_backend

__all__ = ["IncrementalDetokenizer", "Tokenizer", "directory_chat_template"]


class Tokenizer:
    def __init__(self, backend: _Backend, chat_template: str | None, bos_token: str | None,
                 eos_token: str | None, extra_eos_ids: set[int] = frozenset()) -> None:
        self.backend = backend
        self.chat_template = chat_template
        self.bos_token, self.eos_token = bos_token, eos_token
        self.bos_token_id = backend.token_to_id(bos_token) if bos_token else None
        eos = {backend.token_to_id(eos_token)} if eos_token else set()
        self.eos_token_ids: set[int] = {i for i in eos | set(extra_eos_ids) if i is not None}

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size()

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self.backend.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True, **kwargs: Any) -> str:
        """Render the model's chat template (jinja2, HF's environment settings) to a prompt string."""
        if not self.chat_template:
            raise ValueError("chat_template: this tokenizer has no chat template")
        return _compile(self.chat_template).render(
            messages=messages, add_generation_prompt=add_generation_prompt,
            bos_token=self.bos_token or "", eos_token=self.eos_token or "", **kwargs)

    @classmethod
    def from_directory(cls, directory: str | Path, eos_token_ids: list[int] = ()) -> "Tokenizer":
        """tokenizer.json (required) + tokenizer_config.json (special tokens, chat template)."""
        d = Path(directory)
        backend = _Backend.from_file(str(d / "tokenizer.json"))
        conf = _tokenizer_config(d)
        return cls(backend, _chat_template(d, conf), _token_text(conf.get("bos_token")),
                   _token_text(conf.get("eos_token")), set(eos_token_ids))

    @classmethod
    def from_gguf_metadata(cls, metadata: dict[str, Any], source: str) -> "Tokenizer":
        """From tokenizer.ggml.* metadata: byte-level BPE ("gpt2") or SentencePiece BPE ("llama",
        Gemma); see gguf.py."""
        backend = build_backend(metadata, source)
        tokens = metadata["tokenizer.ggml.tokens"]
        bos_id, eos_id = metadata.get("tokenizer.ggml.bos_token_id"), metadata.get("tokenizer.ggml.eos_token_id")
        return cls(backend, metadata.get("tokenizer.chat_template"), tokens[bos_id] if bos_id is not None else None,
                   tokens[eos_id] if eos_id is not None else None)


def directory_chat_template(directory: str | Path) -> str | None:
    """The chat template `from_directory` would give the directory's tokenizer (None: it has
    none), read without building the tokenizer."""
    return _chat_template(Path(directory), _tokenizer_config(Path(directory)))


def _tokenizer_config(d: Path) -> dict:
    path = d / "tokenizer_config.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def _chat_template(d: Path, conf: dict) -> str | None:
    template = conf.get("chat_template")
    if template is None and (d / "chat_template.jinja").is_file():
        template = (d / "chat_template.jinja").read_text()
    if isinstance(template, list):  # named templates: use "default"
        template = {t["name"]: t["template"] for t in template}.get("default")
    return template


def _token_text(token: Any) -> str | None:
    return token.get("content") if isinstance(token, dict) else token


def _raise(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None, separators=None,
            sort_keys: bool = False) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


_TEMPLATES: dict[str, jinja2.Template] = {}


def _compile(source: str) -> jinja2.Template:
    """HF's settings: sandboxed, trim_blocks + lstrip_blocks, loop controls, raise_exception,
    tojson without ASCII escaping, strftime_now."""
    if source not in _TEMPLATES:
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise
        env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
        _TEMPLATES[source] = env.from_string(source)
    return _TEMPLATES[source]
