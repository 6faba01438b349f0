"""StubModel: a stand-in for the model zoo that satisfies the runtime's RuntimeModel protocol
(ascendtile/runtime/model_interface.py), with its tokenizer and config. The runtime's tests and
`ascendtile bench host` share it. It runs one of two ways:

- oracle (default): a tiny deterministic model. Its "KV cache" stores token ids in paged blocks
  (NaN-poisoned when allocated). A query token's next-token logits depend on every token before
  it, read back through the block table — so a wrong slot mapping, block table, prefix-cache hit
  or stale block changes (or NaN-poisons) the output. `oracle_next` recomputes the same greedy
  choice from the token history directly.
- free (`free=True`): forward returns a slice of a preallocated tensor, compute_logits a copy of
  preallocated logits (the sampler modifies them in place; a real model's lm_head allocates them
  too), and the KV cache is never allocated, so a step costs only the runtime's own work (host
  overhead).

Either way every forward call is recorded in `calls` as (tokens, sequences).
"""
from __future__ import annotations

import string
from dataclasses import dataclass, field

import torch
from torch import nn

CHARS = string.ascii_letters + string.digits  # token i <-> CHARS[i]
VOCAB = len(CHARS)
EOS = 0  # "a"
_MIX = 2654435761


def weight(k: int) -> int:
    return (k * 7919) % 1000 + 1


def oracle_next(history: list[int], vocab_size: int = VOCAB) -> int:
    """The greedy next token after `history`, written directly from the definition."""
    h = sum(t * weight(k) for k, t in enumerate(history))
    return (h * _MIX) % vocab_size


def oracle_greedy(prompt: list[int], max_tokens: int, eos: int | None = EOS) -> list[int]:
    out, ids = [], list(prompt)
    for _ in range(max_tokens):
        t = oracle_next(ids)
        out.append(t)
        ids.append(t)
        if t == eos:
            break
    return out


class StubModel(nn.Module):
    """max_tokens: the longest sequence (oracle), or the most tokens one forward call takes (free).
    hidden_size and vocab_size shape the hidden states and logits (the oracle keeps its value in
    hidden column 0)."""

    def __init__(self, max_tokens: int = 4096, *, vocab_size: int = VOCAB, hidden_size: int = 1,
                 free: bool = False, device: str | torch.device = "cpu") -> None:
        super().__init__()
        self.vocab_size, self.hidden_size, self.free = vocab_size, hidden_size, free
        self.cache: torch.Tensor | None = None
        self.calls: list[tuple[int, int]] = []  # (num tokens, num seqs) of every forward
        if free:
            self.hidden = torch.zeros(max_tokens, hidden_size, device=device)
            self.logits = torch.randn(max_tokens, vocab_size, generator=torch.Generator().manual_seed(0)).to(device)
        else:
            self.weights = torch.tensor([weight(k) for k in range(max_tokens)], dtype=torch.float64, device=device)

    def kv_cache_bytes_per_block(self, block_size: int, dtype: torch.dtype, kv_cache_dtype: str = "auto") -> int:
        return block_size * 8  # one float64 token id per slot, whatever the kv_cache_dtype

    def allocate_kv_cache(self, num_blocks: int, block_size: int, dtype: torch.dtype,
                          device: str | torch.device, kv_cache_dtype: str = "auto") -> None:
        if not self.free:
            self.cache = torch.full((num_blocks, block_size), float("nan"), dtype=torch.float64, device=device)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn_metadata) -> torch.Tensor:
        meta = attn_metadata
        self.calls.append((input_ids.shape[0], meta.num_seqs))
        if self.free:
            return self.hidden[: input_ids.shape[0]]
        cache = self.cache
        block_size = cache.shape[1]
        keep = meta.slot_mapping >= 0
        cache.view(-1)[meta.slot_mapping[keep]] = input_ids[keep].double()
        out = torch.zeros(input_ids.shape[0], self.hidden_size, dtype=torch.float64, device=input_ids.device)
        cu, used = meta.cu_seqlens_q.tolist(), meta.seqused_k.tolist()
        assert cu[-1] == input_ids.shape[0] and max(used) <= meta.max_seqlen_k
        for b in range(meta.num_seqs):
            start, end, kv_len = cu[b], cu[b + 1], used[b]
            if kv_len == 0:  # padding row: sees no keys, outputs 0
                continue
            assert end - start <= meta.max_seqlen_q
            blocks = meta.block_tables[b, : -(-kv_len // block_size)].long()
            history = cache[blocks].reshape(-1)[:kv_len]
            prefix = torch.cumsum(history * self.weights[:kv_len], 0)
            expected = torch.arange(kv_len - (end - start), kv_len)
            assert torch.equal(positions[start:end].cpu(), expected), "positions disagree with seqused_k"
            out[start:end, 0] = prefix[expected.to(prefix.device)]
        return out

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        if self.free:
            return self.logits[: hidden.shape[0]].clone()
        h = hidden[:, 0]
        if torch.isnan(h).any():
            raise AssertionError("read an unwritten KV slot")
        target = (h.long() * _MIX) % self.vocab_size
        distance = (torch.arange(self.vocab_size, device=h.device)[None, :] - target[:, None]) % self.vocab_size
        return -0.5 * distance.float()


class StubTokenizer:
    bos_token_id = None
    eos_token_ids = {EOS}

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [CHARS.index(c) for c in text]

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return "".join(CHARS[i] for i in ids)

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        return "".join(m["content"] for m in messages) + ("Z" if add_generation_prompt else "")


@dataclass
class StubConfig:
    """The RuntimeModelConfig fields (ascendtile.model.ModelConfig has them too)."""

    max_position_embeddings: int = 4096
    vocab_size: int = VOCAB
    eos_token_id: list[int] = field(default_factory=list)
    architecture: str = "Stub"


def stub_loaded():
    """The oracle stub as an `ascendtile.model.LoadedModel`, ready for `LLM(stub_loaded())`."""
    from ascendtile.model import LoadedModel

    return LoadedModel(StubModel(), StubTokenizer(), StubConfig())
