"""MHA/GQA attention over the paged KV cache (Llama family, Gemma 3): merged qkv projection,
optional Qwen3/Gemma q/k norm, rope, reshape_and_cache_flash, unified_attention, o_proj. The cache
is in the model dtype, or int8 (kv_cache_dtype "int8") with a dynamic fp32 scale per (token, KV
head) in scale caches beside it (ops/_kv_quant.py).

Under tensor parallelism each rank holds its share of the query heads and of the KV heads
(partition.py: KV heads replicated when there are fewer than ranks), so its paged cache holds
only those heads; qkv is column-parallel and o_proj row-parallel (one all-reduce per layer)."""
from __future__ import annotations

import torch
from torch import nn

import ascendtile.ops as ak
from ascendtile.distributed import tp_rank, tp_size
from ascendtile.huge_pages import huge_page_zeros
from ascendtile.model.attention_metadata import AttentionMetadata
from ascendtile.model.layers.norm import RMSNorm
from ascendtile.model.layers.parallel_linear import ColumnParallelLinear, RowParallelLinear
from ascendtile.model.layers.partition import kv_head_share, split_evenly
from ascendtile.model.layers.rotary import RotaryEmbedding

SCALE_BYTES = 4  # an int8 cache's fp32 scale per (token, KV head), for K and for V


class Attention(nn.Module):
    def __init__(self, hidden_size: int, num_heads: int, num_kv_heads: int, head_dim: int, rotary: RotaryEmbedding,
                 qkv_bias: bool = False, o_bias: bool = False, qk_norm_eps: float | None = None,
                 sliding_window: int = 0, scale: float | None = None, norm_offset: float = 0.0) -> None:
        """qk_norm_eps set = per-head RMSNorm on q and k (weights q_norm/k_norm [head_dim]; Qwen3,
        Gemma 3 with norm_offset 1). scale: softmax scale, default head_dim ** -0.5.
        sliding_window: 0 = full attention. num_heads / num_kv_heads are the model's totals;
        the module keeps this rank's share of each."""
        super().__init__()
        heads = split_evenly(num_heads, "num_attention_heads", tp_size(), tp_rank())
        kv_heads = kv_head_share(num_kv_heads, "num_key_value_heads", tp_size(), tp_rank())
        self.num_heads, self.num_kv_heads, self.head_dim = heads.count, kv_heads.count, head_dim
        self.sliding_window = sliding_window
        self.scale = head_dim ** -0.5 if scale is None else scale
        q_rows, kv_rows = heads.scaled(head_dim), kv_heads.scaled(head_dim)
        self.qkv_proj = ColumnParallelLinear(hidden_size, [q_rows, kv_rows, kv_rows], bias=qkv_bias,
                                             shard_names=["q_proj", "k_proj", "v_proj"])
        self.o_proj = RowParallelLinear(q_rows, hidden_size, bias=o_bias)
        self.q_norm = RMSNorm(head_dim, qk_norm_eps, norm_offset) if qk_norm_eps is not None else None
        self.k_norm = RMSNorm(head_dim, qk_norm_eps, norm_offset) if qk_norm_eps is not None else None
        self.rotary = rotary
        self.key_cache: torch.Tensor | None = None  # [num_blocks, block_size, num_kv_heads, head_dim]
        self.value_cache: torch.Tensor | None = None
        self.kv_cache_dtype = "auto"
        # int8 caches' scales, fp32 [num_blocks, num_kv_heads, block_size]; None for a float cache
        self.k_scale_cache: torch.Tensor | None = None
        self.v_scale_cache: torch.Tensor | None = None

    def cache_bytes_per_block(self, block_size: int, dtype: torch.dtype, kv_cache_dtype: str = "auto") -> int:
        """K and V of block_size tokens: in dtype, or int8 values and one fp32 scale per (token, KV head)."""
        rows = 2 * block_size * self.num_kv_heads
        if kv_cache_dtype == "int8":
            return rows * (self.head_dim + SCALE_BYTES)
        return rows * self.head_dim * torch.empty((), dtype=dtype).element_size()

    def allocate_cache(self, num_blocks: int, block_size: int, dtype: torch.dtype, device: torch.device,
                       kv_cache_dtype: str = "auto") -> None:
        int8 = ak.check_kv_cache_dtype(kv_cache_dtype)
        self.kv_cache_dtype = kv_cache_dtype
        shape = (num_blocks, block_size, self.num_kv_heads, self.head_dim)
        self.key_cache = huge_page_zeros(shape, torch.int8 if int8 else dtype, device)
        self.value_cache = huge_page_zeros(shape, torch.int8 if int8 else dtype, device)
        scales = (num_blocks, self.num_kv_heads, block_size)
        self.k_scale_cache = huge_page_zeros(scales, torch.float32, device) if int8 else None
        self.v_scale_cache = huge_page_zeros(scales, torch.float32, device) if int8 else None

    def forward(self, positions: torch.Tensor, x: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        """x [T, hidden] -> [T, hidden]; writes this step's K/V into the paged cache."""
        if self.key_cache is None:
            raise RuntimeError("KV cache not allocated: call model.allocate_kv_cache(...) first")
        tokens = x.shape[0]
        check = not meta.validated  # a validated step's metadata needs no per-layer checks
        # [T, H + 2 * KVH, D]: the view is taken of the whole (contiguous) qkv output and the heads are
        # sliced after it. A view of a strided slice makes Inductor recompute its strides with guards
        # on the token count (`T != 1`), so a compiled forward traced at T > 1 would recompile at T = 1.
        heads = self.qkv_proj(x).view(tokens, -1, self.head_dim)
        if self.q_norm is None:
            # q and k heads sit side by side in each row and rotate identically: one rope call over
            # the [T, H + KVH, D] slice halves the rope op's per-layer cost on CPU.
            self.rotary(positions, heads[:, :self.num_heads + self.num_kv_heads], None, check)
        q, k, v = heads.split([self.num_heads, self.num_kv_heads, self.num_kv_heads], dim=1)
        if self.q_norm is not None:
            # rms_norm needs rows it can view as [T*H, D]; q/k are strided slices of the qkv output
            q, k = self.q_norm(q.contiguous()), self.k_norm(k.contiguous())
            self.rotary(positions, q, k, check)
        ak.reshape_and_cache_flash(k, v, self.key_cache, self.value_cache, meta.slot_mapping, self.kv_cache_dtype,
                                   k_scale_cache=self.k_scale_cache, v_scale_cache=self.v_scale_cache, validate=check)
        out = ak.unified_attention(q, self.key_cache, self.value_cache, meta.block_tables, meta.cu_seqlens_q,
                                   meta.seqused_k, meta.max_seqlen_q, meta.max_seqlen_k, self.scale,
                                   sliding_window=self.sliding_window, kv_cache_dtype=self.kv_cache_dtype,
                                   k_scale=self.k_scale_cache, v_scale=self.v_scale_cache, validate=check)
        return self.o_proj(out.reshape(tokens, self.num_heads * self.head_dim))
