"""vLLM's decoder attention on our ops: a backend registered under vLLM's CPU_ATTN name (the one
vLLM's CPU platform always picks) that writes K/V with reshape_and_cache_flash and attends with
unified_attention over the paged cache: prefill chunks over cached prefixes and decodes, mixed in
one call per layer.

KV cache layout: customize_spec publishes K and V as two head slots of num_kv_heads·head_size
each, and the preferred layout LHBNC puts each head slot in its own plane spanning every block of
the layer, so a layer's cache view [num_blocks, 2, block_size, num_kv_heads·head_size] unbinds into
K and V caches [num_blocks, block_size, num_kv_heads, head_size] that are each contiguous: our
ops' layout, as the runtime allocates it. Under LBHNC (the block-compact layout vLLM falls back to
when layers' cache shapes differ) the two planes alternate block by block and the ops read them
by block stride.

Refused with NotImplementedError naming the feature: ALiBi, attention sinks, attention types other
than decoder, non-causal batches, KV cache dtypes other than "auto" (fp8), fused output
quantisation, K and V head sizes that differ."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

import torch
from vllm.utils.torch_utils import get_dtype_size
from vllm.v1.attention.backend import (
    AttentionBackend, AttentionImpl, AttentionLayer, AttentionMetadata, AttentionMetadataBuilder, AttentionType,
    CommonAttentionMetadata, MultipleOf,
)
from vllm.v1.kv_cache_interface import AttentionSpec, KVCacheLayout

import ascendtile.ops  # noqa: F401  (registers torch.ops.ascend.*)
from ascendtile.integrations.vllm.counters import count

# unified_attention reads a cache block as 16-row tiles: the block sizes it takes are multiples of 16.
BLOCK_SIZE_MULTIPLE = 16


def _refuse(feature: str) -> None:
    raise NotImplementedError(f"ascendtile attention backend (CPU_ATTN) does not support {feature}")


@dataclass
class AscendtileAttentionMetadata(AttentionMetadata):
    """One step's batch as unified_attention takes it: query_start_loc [num_reqs + 1] int32 (the
    cu_seqlens_q), seq_lens [num_reqs] int32 (cached context + new tokens, the seqused_k),
    block_table [num_reqs, max_blocks] int32; max_query_len / max_seq_len bound them (host ints)."""

    num_actual_tokens: int
    max_query_len: int
    max_seq_len: int
    query_start_loc: torch.Tensor
    seq_lens: torch.Tensor
    block_table: torch.Tensor


class AscendtileAttentionMetadataBuilder(AttentionMetadataBuilder[AscendtileAttentionMetadata]):
    """vLLM's common metadata, cut to the step's requests; no batch reordering (unified_attention
    takes prefills and decodes in any order)."""

    # vLLM's base declares __init__ abstract: a builder has to define one.
    def __init__(self, kv_cache_spec: AttentionSpec, layer_names: list[str], vllm_config, device: torch.device) -> None:
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)

    def build(self, common_prefix_len: int, common_attn_metadata: CommonAttentionMetadata,
              fast_build: bool = False) -> AscendtileAttentionMetadata:
        meta = common_attn_metadata
        # A per-request causal tensor (prefix-LM) or causal=False: unified_attention is causal only.
        if isinstance(meta.causal, torch.Tensor) or not meta.causal:
            _refuse("non-causal attention")
        reqs = meta.num_reqs
        return AscendtileAttentionMetadata(
            num_actual_tokens=meta.num_actual_tokens, max_query_len=meta.max_query_len, max_seq_len=meta.max_seq_len,
            query_start_loc=meta.query_start_loc[:reqs + 1], seq_lens=meta.seq_lens[:reqs],
            block_table=meta.block_table_tensor[:reqs])


class AscendtileAttentionImpl(AttentionImpl[AscendtileAttentionMetadata]):
    """do_kv_cache_update: reshape_and_cache_flash of the step's K/V at vLLM's slot mapping (vLLM
    calls it before forward, and not at all for a layer sharing another layer's cache); forward:
    unified_attention of the step's queries into vLLM's output."""

    def __init__(self, num_heads: int, head_size: int, scale: float, num_kv_heads: int,
                 alibi_slopes: list[float] | None, sliding_window: int | None, kv_cache_dtype: str,
                 logits_soft_cap: float | None = None, attn_type: str = AttentionType.DECODER,
                 kv_sharing_target_layer_name: str | None = None, sinks: torch.Tensor | None = None) -> None:
        if alibi_slopes is not None:
            _refuse("ALiBi (alibi_slopes)")
        if sinks is not None:
            _refuse("attention sinks (sinks)")
        if attn_type != AttentionType.DECODER:
            _refuse(f"attention type '{AttentionType(attn_type).value}' (decoder attention only)")
        if kv_cache_dtype != "auto":
            _refuse(f"kv_cache_dtype {kv_cache_dtype!r} (quantised KV caches; only 'auto': the cache in the model dtype)")
        self.num_heads = num_heads
        self.head_size = head_size
        self.scale = float(scale)
        self.num_kv_heads = num_kv_heads
        self.kv_cache_dtype = kv_cache_dtype
        self.kv_sharing_target_layer_name = kv_sharing_target_layer_name
        # vLLM's window (HF's: the query and the window - 1 keys before it) is our op's; 0 = off.
        self.sliding_window = 0 if sliding_window is None else sliding_window
        self.softcap = 0.0 if logits_soft_cap is None else float(logits_soft_cap)

    def _caches(self, kv_cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V caches [num_blocks, block_size, num_kv_heads, head_size]: views of the layer's
        [num_blocks, 2, block_size, num_kv_heads · head_size] (see customize_spec)."""
        key_cache, value_cache = kv_cache.unbind(1)
        heads = (self.num_kv_heads, self.head_size)
        return key_cache.unflatten(-1, heads), value_cache.unflatten(-1, heads)

    def do_kv_cache_update(self, layer: torch.nn.Module, key: torch.Tensor, value: torch.Tensor,
                           kv_cache: torch.Tensor, slot_mapping: torch.Tensor) -> None:
        key_cache, value_cache = self._caches(kv_cache)
        count("reshape_and_cache_flash")
        torch.ops.ascend.reshape_and_cache_flash(key, value, key_cache, value_cache, slot_mapping, self.kv_cache_dtype,
                                                 layer._k_scale, layer._v_scale)

    def forward(self, layer: AttentionLayer, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                kv_cache: torch.Tensor, attn_metadata: AscendtileAttentionMetadata | None, output: torch.Tensor,
                output_scale: torch.Tensor | None = None, output_block_scale: torch.Tensor | None = None) -> torch.Tensor:
        """query [T, num_heads, head_size] (the first num_actual_tokens are the step's), output the
        same shape, written in place and returned."""
        if output_scale is not None or output_block_scale is not None:
            _refuse("fused output quantisation (output_scale)")
        if attn_metadata is None:  # vLLM's profiling run: no batch, no cache
            return output
        meta = attn_metadata
        tokens = meta.num_actual_tokens
        key_cache, value_cache = self._caches(kv_cache)
        count("unified_attention")
        torch.ops.ascend.unified_attention(output[:tokens], query[:tokens], key_cache, value_cache, meta.block_table,
                                           meta.query_start_loc, meta.seq_lens, meta.max_query_len, meta.max_seq_len,
                                           self.scale, self.softcap, self.sliding_window)
        return output


class AscendtileAttentionBackend(AttentionBackend):
    """Named CPU_ATTN: vLLM builds each layer's backend enum from get_name() and looks the class up
    by it, which resolves to this class once register_backend overrode CPU_ATTN."""

    # vLLM writes the cache through do_kv_cache_update before forward.
    forward_includes_kv_cache_update: bool = False
    supported_dtypes: ClassVar[list[torch.dtype]] = [torch.float16, torch.bfloat16, torch.float32]
    supported_kv_cache_dtypes: ClassVar[list[str]] = ["auto"]

    @staticmethod
    def get_name() -> str:
        return "CPU_ATTN"

    @staticmethod
    def get_impl_cls() -> type[AscendtileAttentionImpl]:
        return AscendtileAttentionImpl

    @staticmethod
    def get_builder_cls() -> type[AscendtileAttentionMetadataBuilder]:
        return AscendtileAttentionMetadataBuilder

    @staticmethod
    def get_supported_kernel_block_sizes(kv_cache_spec=None) -> list[int | MultipleOf]:
        return [MultipleOf(BLOCK_SIZE_MULTIPLE)]

    @classmethod
    def supports_sliding_window(cls) -> bool:
        return True

    @classmethod
    def customize_spec(cls, spec: AttentionSpec) -> AttentionSpec:
        """K and V as two head slots (a page is [2, block_size, num_kv_heads · head_size]) instead
        of vLLM's default [num_kv_heads, block_size, 2 · head_size], whose K and V interleave per
        token and head, which no layout makes one [block_size, num_kv_heads, head_size] run."""
        if spec.head_size != spec.head_size_v:
            _refuse(f"different K and V head sizes ({spec.head_size} and {spec.head_size_v})")
        return replace(spec, num_head_slots=2,
                       state_content_bytes=spec.num_kv_heads * spec.head_size * get_dtype_size(spec.dtype))

    @classmethod
    def supported_kv_cache_layouts(cls) -> tuple[KVCacheLayout, ...]:
        # LHBNC: one plane per head slot, K and V caches each contiguous. LBHNC: block-compact, for
        # models whose layers' cache shapes differ (vLLM then allows block-compact layouts only).
        return (KVCacheLayout.LHBNC, KVCacheLayout.LBHNC)
