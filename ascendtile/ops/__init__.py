"""torch.ops.ascend.* registration (importing this package registers every op) and functional
wrappers that allocate outputs: `ascendtile.ops.rms_norm(x, w, eps)` etc. One module per op
family, named like its kernels/ module; `_`-prefixed modules hold checks shared by families."""
from ascendtile.ops._attention import check_paged_step
from ascendtile.ops._kv_quant import KV_CACHE_DTYPES, check_kv_cache_dtype
from ascendtile.ops._registry import REGISTERED, kernel_path
from ascendtile.ops.activation import gelu_and_mul, gelu_tanh_and_mul, silu_and_mul
from ascendtile.ops.attention_paged import paged_attention
from ascendtile.ops.attention_unified import unified_attention
from ascendtile.ops.attention_varlen import flash_attention_varlen
from ascendtile.ops.fused_quant import (
    fused_add_rms_norm_static_int8_quant, rms_norm_dynamic_per_token_quant, rms_norm_static_int8_quant,
    silu_and_mul_quant,
)
from ascendtile.ops.kv_cache import concat_and_cache_mla, reshape_and_cache_flash
from ascendtile.ops.mask import causal_mask
from ascendtile.ops.mla import mla_attention
from ascendtile.ops.norm import fused_add_rms_norm, rms_norm
from ascendtile.ops.quant import dynamic_scaled_int8_quant, static_scaled_int8_quant
from ascendtile.ops.rejection import rejection_greedy_sample, rejection_random_sample, sample_recovered_tokens
from ascendtile.ops.rope import rotary_embedding
from ascendtile.ops.sampling import (
    apply_penalties, gather_logprobs, process_logits, sample_tokens, update_token_counts,
)
from ascendtile.ops.scaled_mm import scaled_mm, w8a8_linear
from ascendtile.ops.w4a16 import w4a16_linear

__all__ = [
    "REGISTERED", "kernel_path", "check_paged_step", "KV_CACHE_DTYPES", "check_kv_cache_dtype",
    "rms_norm", "fused_add_rms_norm", "silu_and_mul", "gelu_tanh_and_mul", "gelu_and_mul", "rotary_embedding",
    "reshape_and_cache_flash", "concat_and_cache_mla", "causal_mask",
    "paged_attention", "flash_attention_varlen", "unified_attention", "mla_attention",
    "static_scaled_int8_quant", "dynamic_scaled_int8_quant", "scaled_mm", "w8a8_linear", "w4a16_linear",
    "rms_norm_dynamic_per_token_quant", "rms_norm_static_int8_quant", "fused_add_rms_norm_static_int8_quant",
    "silu_and_mul_quant",
    "apply_penalties", "process_logits", "sample_tokens", "update_token_counts", "gather_logprobs",
    "rejection_greedy_sample", "sample_recovered_tokens", "rejection_random_sample",
]
