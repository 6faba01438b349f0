"""The decoder skeleton shared by the model zoo: token embedding (optionally scaled, Gemma),
pre-norm decoder layers with vLLM's fused residual, final norm, LM head (tied or not, optional
final logit soft-capping), and per-layer paged KV caches. Under tensor parallelism the embedding
and the LM head are vocab-parallel (the vocabulary padded to a multiple of the group size, the
padding rows zero) and compute_logits gathers every rank's range of the logits and trims the
padding, so each rank returns the whole vocabulary's logits and sampling never sees a padded id.

Parameter names follow HF checkpoints (model.embed_tokens.weight, model.layers.N.self_attn...,
lm_head.weight); merged projections are resolved by the weight loader.
"""
from __future__ import annotations

import torch
from torch import nn

from ascendtile.distributed import all_gather, tp_rank, tp_size
from ascendtile.model.architectures.model_config import ModelConfig
from ascendtile.model.attention_metadata import AttentionMetadata
from ascendtile.model.layers.embedding import VocabParallelEmbedding
from ascendtile.model.layers.linear import Linear, PackedWeight, float_linear, pack_weight
from ascendtile.model.layers.norm import RMSNorm
from ascendtile.model.layers.parallel_linear import ColumnParallelLinear
from ascendtile.model.layers.partition import Share, padded_split


def vocab_share(config: ModelConfig) -> Share:
    """This rank's range of the padded vocabulary: embedding rows and LM head rows alike, so a
    tied head multiplies by exactly the rows it owns."""
    return padded_split(config.vocab_size, tp_size(), tp_rank())


class DecoderLayer(nn.Module):
    def __init__(self, hidden_size: int, eps: float, self_attn: nn.Module, mlp: nn.Module,
                 norm_offset: float = 0.0) -> None:
        """norm_offset: the norms' checkpoint_offset (Gemma's (1 + w) norms: 1.0)."""
        super().__init__()
        self.input_layernorm = RMSNorm(hidden_size, eps, norm_offset)
        self.self_attn = self_attn
        self.post_attention_layernorm = RMSNorm(hidden_size, eps, norm_offset)
        self.mlp = mlp

    def attend(self, positions: torch.Tensor, h: torch.Tensor, residual: torch.Tensor | None,
               meta: AttentionMetadata) -> tuple[torch.Tensor, torch.Tensor]:
        """Input norm (adding the previous layer's output into the residual) and attention."""
        if residual is None:
            residual, h = h, self.input_layernorm(h)
        else:
            h, residual = self.input_layernorm(h, residual)
        return self.self_attn(positions, h, meta), residual

    def forward(self, positions: torch.Tensor, h: torch.Tensor, residual: torch.Tensor | None,
                meta: AttentionMetadata) -> tuple[torch.Tensor, torch.Tensor]:
        h, residual = self.attend(positions, h, residual, meta)
        h, residual = self.post_attention_layernorm(h, residual)
        return self.mlp(h), residual


class DecoderModel(nn.Module):
    def __init__(self, config: ModelConfig, layers: list[nn.Module], embed_scale: float | None = None,
                 norm_offset: float = 0.0) -> None:
        """layers: modules with DecoderLayer's forward signature. embed_scale multiplies the
        embeddings (Gemma: sqrt(hidden), rounded to the model dtype as HF does). norm_offset: the
        final norm's checkpoint_offset."""
        super().__init__()
        self.embed_tokens = VocabParallelEmbedding(vocab_share(config), config.hidden_size)
        dtype = self.embed_tokens.weight.dtype
        self.embed_scale = None if embed_scale is None else float(torch.tensor(embed_scale, dtype=dtype))
        self.layers = nn.ModuleList(layers)
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps, norm_offset)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        h, residual = self.embed_tokens(input_ids), None
        if self.embed_scale is not None:
            h = h * self.embed_scale
        for layer in self.layers:
            h, residual = layer(positions, h, residual, meta)
        h, _ = self.norm(h, residual)
        return h


class CausalLM(nn.Module):
    """Subclasses build `self.model = DecoderModel(...)`; this adds the LM head and KV cache.
    Subclasses set `family`, the name config parsing knows them by (ModelConfig.family), and
    `tensor_parallel` once every layer they build shards under a tensor-parallel group."""

    family: str
    tensor_parallel: bool = False

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        if tp_size() > 1 and not self.tensor_parallel:
            raise NotImplementedError(f"{config.architecture}: tensor parallelism is not implemented for this "
                                      f"architecture (tensor_parallel_size {tp_size()})")
        self.config = config
        self.lm_head = (None if config.tie_word_embeddings
                        else ColumnParallelLinear(config.hidden_size, [vocab_share(config)]))
        self.tied_head: PackedWeight | None = None  # the packed embedding, when tied (post_load)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn_metadata: AttentionMetadata) -> torch.Tensor:
        """Flat token batch: input_ids [T] and positions [T] int64 -> hidden [T, hidden_size]."""
        return self.model(input_ids, positions, attn_metadata)

    @property
    def head_weight(self) -> torch.Tensor | None:
        """The float weight [vocab share, hidden_size] compute_logits multiplies by (the embedding's
        when tied), or None for a quantized head."""
        if self.lm_head is None:
            return self.model.embed_tokens.weight
        return self.lm_head.weight if self.lm_head.kind == "float" else None

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [N, hidden_size] -> fp32 logits [N, vocab_size]."""
        if self.lm_head is None:
            logits = float_linear(hidden, self.model.embed_tokens.weight, None, self.tied_head)
        else:
            logits = self.lm_head(hidden)  # never W8A8 (model/loading/w8a8.py keeps it float)
        logits = all_gather(logits.float(), dim=-1)
        if logits.shape[-1] != self.config.vocab_size:  # padded vocabulary (tensor parallelism)
            logits = logits[:, :self.config.vocab_size].contiguous()
        cap = self.config.final_logit_softcapping
        return torch.tanh(logits / cap) * cap if cap else logits

    def attention_layers(self) -> list[nn.Module]:
        return [layer.self_attn for layer in self.model.layers]

    def kv_cache_bytes_per_block(self, block_size: int, dtype: torch.dtype, kv_cache_dtype: str = "auto") -> int:
        """Every layer's bytes per block: the cache in dtype ("auto"), or int8 with its scales."""
        return sum(attn.cache_bytes_per_block(block_size, dtype, kv_cache_dtype) for attn in self.attention_layers())

    def allocate_kv_cache(self, num_blocks: int, block_size: int, dtype: torch.dtype, device: str | torch.device,
                          kv_cache_dtype: str = "auto") -> None:
        """(Re-)allocate every layer's paged cache, zero-filled, in dtype ("auto") or int8 with its
        scale caches ("int8"); the old caches are dropped first."""
        layers = self.attention_layers()
        for attn in layers:  # release every old cache first so old and new never coexist in memory
            attn.allocate_cache(0, block_size, dtype, device, kv_cache_dtype)
        for attn in layers:
            attn.allocate_cache(num_blocks, block_size, dtype, torch.device(device), kv_cache_dtype)

    def post_load(self) -> None:
        """Derive what is computed from loaded weights: every float Linear and the tied LM head
        packed for oneDNN on CPU fp32 (subclasses add theirs, e.g. MLA's absorbed projections)."""
        for module in self.modules():
            if isinstance(module, Linear):
                module.prepack()
        if self.lm_head is None:
            self.tied_head = pack_weight(self.model.embed_tokens.weight)
