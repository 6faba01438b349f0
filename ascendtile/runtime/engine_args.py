"""EngineArgs: the user's engine options, resolved once in LLM and sent as they are to every
tensor-parallel worker; `create_engine` builds the Engine of one process (or one rank) from them
and a loaded model."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ascendtile.compilation import CompilationConfig
from ascendtile.distributed import all_reduce, tp_size
from ascendtile.runtime.config import EngineConfig, kv_cache_blocks
from ascendtile.runtime.engine import Engine
from ascendtile.runtime.model_interface import RuntimeModel, RuntimeModelConfig, require
from ascendtile.runtime.speculative_config import SpeculativeConfig


@dataclass(frozen=True)
class EngineArgs:
    """LLM's engine options (see LLM for each); picklable, so spawned ranks get the same ones."""

    dtype: torch.dtype
    device: torch.device
    max_model_len: int | None
    max_num_seqs: int
    max_num_batched_tokens: int
    block_size: int
    num_kv_blocks: int | None
    kv_cache_memory: int | None
    enable_prefix_caching: bool
    graph: str
    quantization: str | None
    seed: int
    compilation: CompilationConfig
    speculative_config: SpeculativeConfig | None = None
    kv_cache_dtype: str = "auto"


def _agreed_blocks(blocks: int) -> int:
    """The smallest block count over the tensor-parallel group: every rank runs the same
    scheduler, so every rank's cache must hold the same blocks (free memory may differ)."""
    if tp_size() == 1:
        return blocks
    return int(all_reduce(torch.tensor([blocks], dtype=torch.int64), op="min").item())


def create_engine(loaded, args: EngineArgs) -> Engine:
    """An Engine over `loaded` (a LoadedModel: model, tokenizer, config), its KV cache sized by
    args; inside a tensor-parallel group every rank must call this (the block count is agreed
    with one all-reduce). Raises ValueError naming `max_model_len` when it exceeds the model's
    max_position_embeddings, and TypeError naming `model` when it breaks the runtime's protocol."""
    require(loaded.model, RuntimeModel, "model")
    require(loaded.config, RuntimeModelConfig, "model")
    model, model_config = loaded.model, loaded.config
    limit = model_config.max_position_embeddings
    max_model_len = limit if args.max_model_len is None else args.max_model_len
    if not 1 < max_model_len <= limit:
        raise ValueError(f"max_model_len: must be in [2, {limit}] (the model's max_position_embeddings)")
    bytes_per_block = model.kv_cache_bytes_per_block(args.block_size, args.dtype, args.kv_cache_dtype)
    blocks = kv_cache_blocks(bytes_per_block, args.device, num_blocks=args.num_kv_blocks,
                             memory_bytes=args.kv_cache_memory, max_model_len=max_model_len,
                             max_num_seqs=args.max_num_seqs, block_size=args.block_size,
                             activation_bytes=args.max_num_batched_tokens * model_config.vocab_size * 4)
    config = EngineConfig(max_model_len, args.max_num_seqs, args.max_num_batched_tokens, args.block_size,
                          _agreed_blocks(blocks), args.enable_prefix_caching, args.graph, args.device, args.dtype,
                          args.compilation, args.speculative_config, args.kv_cache_dtype)
    eos = set(loaded.tokenizer.eos_token_ids) if loaded.tokenizer is not None else set()
    eos |= set(model_config.eos_token_id or [])
    return Engine(model, loaded.tokenizer, eos, config, args.seed)
