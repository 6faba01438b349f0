"""DeepSeek-V2 multi-head latent attention over the paged latent cache (absorbed form).

Per token: q = q_proj(x) (or q_b_proj(norm(q_a_proj(x))) with q_lora), split [nope | rope];
kv_a_proj(x) = [kv_c (kv_lora_rank) | k_pe (rope dim)], kv_c normed. Rope (interleaved pairs,
as HF's DeepSeek-V2) rotates q_pe and the single shared k_pe. The cache holds [kv_c | k_pe] per
token. kv_b_proj's weight [H·(nope+v), L] splits into W_UK [H, nope, L] and W_UV [H, v, L]:
attention runs in latent space with query [q_nope·W_UK | q_pe] and V = kv_c, and the [T, H, L]
result is mapped back by W_UV before o_proj.

Tensor parallelism (vLLM's scheme): the heads split over the ranks. q_proj / q_b_proj and
kv_b_proj are column-parallel by heads, so a rank's absorbed W_UK / W_UV cover its heads only;
q_a_proj and kv_a_proj_with_mqa (the latent and k_pe every head reads) and the norms are
replicated, so every rank caches the full [kv_c | k_pe] latent of each token for its heads;
o_proj is row-parallel (one all-reduce per layer).

The latent cache is in the model dtype, or int8 (kv_cache_dtype "int8") with a dynamic fp32 scale
per token for its latent and its rope part, in a scale cache [num_blocks, 2, block_size] beside it
(ops/_kv_quant.py).
"""
from __future__ import annotations

import torch
from torch import nn

import ascendtile.ops as ak
from ascendtile.distributed import tp_rank, tp_size
from ascendtile.huge_pages import huge_page_zeros
from ascendtile.model.attention_metadata import AttentionMetadata
from ascendtile.model.layers.linear import Linear
from ascendtile.model.layers.norm import RMSNorm
from ascendtile.model.layers.parallel_linear import ColumnParallelLinear, RowParallelLinear
from ascendtile.model.layers.partition import split_evenly
from ascendtile.model.layers.rotary import RotaryEmbedding

SCALE_BYTES = 4  # an int8 cache's fp32 scales per token: one for the latent, one for the rope part
# HF builds q_a_layernorm / kv_a_layernorm with DeepseekV2RMSNorm's default eps, not rms_norm_eps.
LATENT_NORM_EPS = 1e-6


class MLAttention(nn.Module):
    def __init__(self, hidden_size: int, num_heads: int, q_lora_rank: int | None, kv_lora_rank: int,
                 qk_nope_head_dim: int, qk_rope_head_dim: int, v_head_dim: int, scale: float,
                 rotary: RotaryEmbedding, attention_bias: bool = False) -> None:
        """num_heads: the model's total (num_attention_heads); the module keeps this rank's share."""
        super().__init__()
        heads = split_evenly(num_heads, "num_attention_heads", tp_size(), tp_rank())
        self.num_heads, self.kv_lora_rank = heads.count, kv_lora_rank
        self.nope_dim, self.rope_dim, self.v_dim = qk_nope_head_dim, qk_rope_head_dim, v_head_dim
        self.scale = scale
        q_rows = [heads.scaled(qk_nope_head_dim + qk_rope_head_dim)]
        if q_lora_rank is None:
            self.q_proj = ColumnParallelLinear(hidden_size, q_rows)
        else:
            self.q_a_proj = Linear(hidden_size, q_lora_rank, bias=attention_bias)
            self.q_a_layernorm = RMSNorm(q_lora_rank, LATENT_NORM_EPS)
            self.q_b_proj = ColumnParallelLinear(q_lora_rank, q_rows)
        self.kv_a_proj_with_mqa = Linear(hidden_size, kv_lora_rank + qk_rope_head_dim, bias=attention_bias)
        self.kv_a_layernorm = RMSNorm(kv_lora_rank, LATENT_NORM_EPS)
        self.kv_b_proj = ColumnParallelLinear(kv_lora_rank, [heads.scaled(qk_nope_head_dim + v_head_dim)])
        self.o_proj = RowParallelLinear(heads.scaled(v_head_dim), hidden_size, bias=attention_bias)
        self.rotary = rotary
        self.kv_cache: torch.Tensor | None = None  # [num_blocks, block_size, kv_lora_rank + rope dim]
        self.kv_cache_dtype = "auto"
        self.kv_scale_cache: torch.Tensor | None = None  # int8 cache: fp32 [num_blocks, 2, block_size]
        # Derived from kv_b_proj by absorb_weights(): W_UK [H, nope, L], W_UV [H, v, L] for this rank's
        # H heads. Buffers, so .to(device) moves them; not persistent, so checkpoints keep only kv_b_proj.
        self.register_buffer("w_uk", None, persistent=False)
        self.register_buffer("w_uv", None, persistent=False)

    def absorb_weights(self) -> None:
        """Split kv_b_proj's (dequantized) weight [H·(nope+v), L] into W_UK [H, nope, L] and
        W_UV [H, v, L], H this rank's heads; call after loading or quantizing."""
        w = self.kv_b_proj.dequantized_weight(self.kv_a_layernorm.weight.dtype)
        w = w.view(self.num_heads, self.nope_dim + self.v_dim, self.kv_lora_rank)
        self.w_uk = w[:, : self.nope_dim].contiguous()
        self.w_uv = w[:, self.nope_dim:].contiguous()

    def cache_bytes_per_block(self, block_size: int, dtype: torch.dtype, kv_cache_dtype: str = "auto") -> int:
        """The latent rows of block_size tokens: in dtype, or int8 values and two fp32 scales each."""
        width = self.kv_lora_rank + self.rope_dim
        if kv_cache_dtype == "int8":
            return block_size * (width + 2 * SCALE_BYTES)
        return block_size * width * torch.empty((), dtype=dtype).element_size()

    def allocate_cache(self, num_blocks: int, block_size: int, dtype: torch.dtype, device: torch.device,
                       kv_cache_dtype: str = "auto") -> None:
        int8 = ak.check_kv_cache_dtype(kv_cache_dtype)
        self.kv_cache_dtype = kv_cache_dtype
        self.kv_cache = huge_page_zeros((num_blocks, block_size, self.kv_lora_rank + self.rope_dim),
                                        torch.int8 if int8 else dtype, device)
        self.kv_scale_cache = huge_page_zeros((num_blocks, 2, block_size), torch.float32, device) if int8 else None

    def _query(self, x: torch.Tensor) -> torch.Tensor:
        if hasattr(self, "q_proj"):
            return self.q_proj(x)
        return self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))

    def forward(self, positions: torch.Tensor, x: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        """x [T, hidden] -> [T, hidden]; writes this step's latent KV into the paged cache."""
        if self.kv_cache is None:
            raise RuntimeError("KV cache not allocated: call model.allocate_kv_cache(...) first")
        if self.w_uk is None:
            self.absorb_weights()
        tokens = x.shape[0]
        q = self._query(x).view(tokens, self.num_heads, self.nope_dim + self.rope_dim)
        q_nope, q_pe = q.split([self.nope_dim, self.rope_dim], dim=-1)
        kv_c, k_pe = self.kv_a_proj_with_mqa(x).split([self.kv_lora_rank, self.rope_dim], dim=-1)
        kv_c = self.kv_a_layernorm(kv_c)
        # Contiguous copies for the in-place rotation. Here and below, no op whose result's strides
        # depend on whether the step has one token (.contiguous(), reshape, einsum): a trace with
        # dynamic sizes (compilation levels 2 and 3) would guard on the token count.
        q_pe = q_pe.clone(memory_format=torch.contiguous_format)
        k_pe = k_pe.clone(memory_format=torch.contiguous_format).view(tokens, 1, self.rope_dim)
        self.rotary(positions, q_pe, k_pe)
        ak.concat_and_cache_mla(kv_c, k_pe.view(tokens, self.rope_dim), self.kv_cache, meta.slot_mapping,
                                self.kv_cache_dtype, scale_cache=self.kv_scale_cache)
        # per-head matmuls: bmm over [H, T, .] views
        q_latent = torch.bmm(q_nope.transpose(0, 1), self.w_uk).transpose(0, 1)
        query = torch.cat([q_latent, q_pe], dim=-1)
        out = ak.mla_attention(query, self.kv_cache, meta.block_tables, meta.cu_seqlens_q, meta.seqused_k,
                               meta.max_seqlen_q, meta.max_seqlen_k, self.kv_lora_rank, self.scale, self.kv_cache_dtype,
                               self.kv_scale_cache)
        out = torch.bmm(out.transpose(0, 1), self.w_uv.transpose(1, 2)).transpose(0, 1)
        out = out.clone(memory_format=torch.contiguous_format)
        return self.o_proj(out.view(tokens, self.num_heads * self.v_dim))
