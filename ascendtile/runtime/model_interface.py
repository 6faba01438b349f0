"""What the runtime needs from a model: the RuntimeModel protocol (the network) and the
RuntimeModelConfig protocol (the config fields LLM reads). Every architecture of the model zoo
(ascendtile.model's CausalLM subclasses) and the stub model (ascendtile.bench.stub_model) satisfy
both; tests/runtime/test_model_interface.py checks each one, method names and parameter names
included, so renaming a method on either side fails there rather than in a generate() call.

The runtime never reads anything else of a model: not its layers, not its parameters.
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch

from ascendtile.model.attention_metadata import AttentionMetadata


@runtime_checkable
class RuntimeModel(Protocol):
    """A decoder-only LM over a flat token batch and a paged KV cache it owns.

    Called as `model(input_ids, positions, attn_metadata)` (an nn.Module's __call__ runs
    forward); GraphRunner captures exactly that call."""

    def __call__(self, input_ids: torch.Tensor, positions: torch.Tensor,
                 attn_metadata: AttentionMetadata) -> torch.Tensor: ...

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor,
                attn_metadata: AttentionMetadata) -> torch.Tensor:
        """input_ids [T] int64, positions [T] int64 (every sequence's tokens back to back, as
        attn_metadata.cu_seqlens_q lays them out) -> hidden states [T, H]. Writes the KV of
        each token to its slot (attn_metadata.slot_mapping; -1 = padding, not written)."""
        ...

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [N, H] (the rows to sample from) -> fp32 logits [N, vocab_size], a tensor of
        its own: the sampler modifies it in place."""
        ...

    def kv_cache_bytes_per_block(self, block_size: int, dtype: torch.dtype, kv_cache_dtype: str = "auto") -> int:
        """Bytes one KV block of block_size tokens takes over all layers in dtype, or as an int8
        cache with its scales (kv_cache_dtype "int8"); sizes the cache."""
        ...

    def allocate_kv_cache(self, num_blocks: int, block_size: int, dtype: torch.dtype,
                          device: str | torch.device, kv_cache_dtype: str = "auto") -> None:
        """(Re-)allocate the paged cache: num_blocks blocks of block_size tokens on device, in dtype
        ("auto") or int8 ("int8", vLLM's kv_cache_dtype)."""
        ...


@runtime_checkable
class RuntimeModelConfig(Protocol):
    """The config fields LLM reads (ascendtile.model.ModelConfig has them all)."""

    max_position_embeddings: int  # the longest max_model_len allowed
    vocab_size: int  # token ids in prompts are checked against it; sizes the activation reserve
    eos_token_id: list[int]  # added to the tokenizer's EOS ids


def protocol_members(protocol: type) -> list[str]:
    """The names a protocol asks for: its annotated fields and its methods (__call__ included)."""
    names = set(vars(protocol).get("__annotations__", {}))
    names |= {name for name, value in vars(protocol).items()
              if callable(value) and (not name.startswith("_") or name == "__call__")}
    return sorted(names)


def require(obj: object, protocol: type, argument: str) -> None:
    """TypeError naming `argument` and what is missing unless obj has every member of protocol."""
    missing = [name for name in protocol_members(protocol) if not hasattr(obj, name)]
    if missing:
        raise TypeError(f"{argument}: {type(obj).__name__} is not a {protocol.__name__} "
                        f"(missing {', '.join(missing)}; see ascendtile/runtime/model_interface.py)")
