"""Tokenizers on the `tokenizers` package: HF tokenizer.json and chat templates (tokenizer.py),
backends rebuilt from GGUF metadata (gguf.py) and incremental detokenization (detokenizer.py).
Imports nothing else from ascendtile.model."""
