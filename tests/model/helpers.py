"""Shared model-test helpers: tiny HF checkpoints built offline, a paged-cache driver that feeds
flat token batches the way the runtime does, and HF reference logits by full recompute."""
from __future__ import annotations

import torch

from ascendtile.model import AttentionMetadata, LoadedModel, build_model


class PagedDriver:
    """Gives every sequence its own blocks (in a shuffled order, so block tables are not the
    identity) and builds AttentionMetadata for a step of (sequence, new tokens) pairs."""

    def __init__(self, model, num_seqs: int, block_size: int = 16, blocks_per_seq: int = 4, dtype=torch.float32,
                 kv_cache_dtype: str = "auto"):
        self.model, self.block_size = model, block_size
        self.num_blocks = num_blocks = num_seqs * blocks_per_seq + 1
        order = torch.randperm(num_blocks - 1, generator=torch.Generator().manual_seed(1)) + 1
        self.tables = order.view(num_seqs, blocks_per_seq).to(torch.int32)
        model.allocate_kv_cache(num_blocks, block_size, dtype, "cpu", kv_cache_dtype)
        names = ("key_cache", "value_cache", "kv_cache", "k_scale_cache", "v_scale_cache", "kv_scale_cache")
        for attn in model.attention_layers():  # block 0 is never used: poison it (an int8 cache: its scales)
            for cache in (getattr(attn, n, None) for n in names):
                if cache is not None and cache.is_floating_point():
                    cache[0].fill_(float("nan"))
        self.seen = [0] * num_seqs

    def step(self, tokens: dict[int, list[int]]) -> torch.Tensor:
        """tokens: sequence id -> its new token ids. Returns fp32 logits [T, vocab] in that order."""
        ids, pos, slots, cu, used, rows = [], [], [], [0], [], []
        for seq, new in tokens.items():
            start = self.seen[seq]
            for i, tok in enumerate(new):
                p = start + i
                ids.append(tok)
                pos.append(p)
                slots.append(int(self.tables[seq, p // self.block_size]) * self.block_size + p % self.block_size)
            self.seen[seq] = start + len(new)
            cu.append(cu[-1] + len(new))
            used.append(self.seen[seq])
            needed = -(-self.seen[seq] // self.block_size)
            row = torch.full((self.tables.shape[1],), -1, dtype=torch.int32)
            row[:needed] = self.tables[seq, :needed]
            rows.append(row)
        meta = AttentionMetadata(
            slot_mapping=torch.tensor(slots, dtype=torch.int64), block_tables=torch.stack(rows),
            cu_seqlens_q=torch.tensor(cu, dtype=torch.int32), seqused_k=torch.tensor(used, dtype=torch.int32),
            max_seqlen_q=max(len(v) for v in tokens.values()), max_seqlen_k=max(used))
        positions = torch.tensor(pos)
        meta.validate(positions, self.block_size, self.num_blocks)  # as the ModelRunner does: the layers then skip per-op checks
        with torch.no_grad():
            hidden = self.model(torch.tensor(ids), positions, meta)
            return self.model.compute_logits(hidden)


def hf_logits(hf_model, ids: list[int]) -> torch.Tensor:
    """HF's fp32 logits [len(ids), vocab] by a full recompute of the sequence."""
    with torch.no_grad():
        return hf_model(torch.tensor([ids])).logits[0].float()


def random_loaded(config, seed: int = 0) -> LoadedModel:
    """Our model for a parsed config with every parameter N(0, 0.1²) (no tokenizer), post-loaded."""
    model = build_model(config, torch.float32, "cpu")
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(torch.randn(param.shape, generator=gen) * 0.1)
    model.post_load()
    return LoadedModel(model.eval(), None, config)


def save_tiny(hf_config, directory, seed: int = 0, randomize_norms: bool = False):
    """Random-weight HF model from a config, saved as safetensors; returns the HF model (eval).
    randomize_norms: fill every norm weight with random values (HF initialises them to a
    constant, which would hide a wrong or swapped norm weight)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(hf_config, attn_implementation="eager").float().eval()
    if randomize_norms:
        randomize_norm_weights(model)
    model.save_pretrained(directory)
    return model


def randomize_norm_weights(model: torch.nn.Module) -> list[str]:
    """Fill the weight of every norm module (input/post-attention, q/k, q_a/kv_a, final, ...) with
    distinct random values, so a swapped or misapplied norm changes the output. Returns the
    parameter names it filled; refuses a model with no norm (the match would be vacuous)."""
    names = [f"{prefix}.weight" for prefix, module in model.named_modules()
             if type(module).__name__.endswith(("RMSNorm", "LayerNorm")) and getattr(module, "weight", None) is not None]
    if not names:
        raise ValueError(f"model: no norm modules found in {type(model).__name__}")
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name in names:
            params[name].uniform_(-0.5, 0.5)
    return names


def check_parity(ours, hf_model, prompts: list[list[int]], decode_steps: int, atol: float) -> float:
    """Prefill all prompts in one flat batch, then greedy-decode them together through the paged
    cache; every step's logits must match HF's full recompute within atol and give the same greedy
    tokens. Returns the largest |Δlogit| seen."""
    driver = PagedDriver(ours, len(prompts))
    seqs = [list(p) for p in prompts]
    worst = 0.0
    logits = driver.step(dict(enumerate(seqs)))
    offsets = [0]
    for p in seqs:
        offsets.append(offsets[-1] + len(p))
    last = []
    for b, seq in enumerate(seqs):
        ref = hf_logits(hf_model, seq)
        got = logits[offsets[b]: offsets[b + 1]]
        worst = max(worst, (got - ref).abs().max().item())
        last.append(got[-1])
    for _ in range(decode_steps):
        nxt = [int(row.argmax()) for row in last]
        for b, tok in enumerate(nxt):
            seqs[b].append(tok)
        logits = driver.step({b: [tok] for b, tok in enumerate(nxt)})
        last = []
        for b, seq in enumerate(seqs):
            ref = hf_logits(hf_model, seq)[-1]
            assert int(ref.argmax()) == int(logits[b].argmax()), f"greedy token differs for sequence {b}"
            worst = max(worst, (logits[b] - ref).abs().max().item())
            last.append(logits[b])
    assert worst < atol, f"max |Δlogit| {worst} >= {atol}"
    return worst
