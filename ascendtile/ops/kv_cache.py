"""Ops: reshape_and_cache_flash (MHA/GQA paged cache), concat_and_cache_mla (latent cache)."""
from __future__ import annotations

import torch

from ascendtile.ops._indices import check_slots
from ascendtile.ops._registry import register_op, unchecked
from ascendtile.ops._validate import FLOAT_DTYPES, INDEX_DTYPES, check_same_device, check_same_dtype, check_shape, check_tensor

# Quantised caches (fp8/int8) come with their own kernels; until then only "auto" (store as is).
SUPPORTED_KV_CACHE_DTYPES = ("auto",)


def _check_common(slot_mapping: torch.Tensor, tokens: int, cache: torch.Tensor, kv_cache_dtype: str,
                  scales: dict[str, torch.Tensor], per_head: int | None = None) -> None:
    """per_head: the cache's head count when a scale may also be one per KV head (vLLM's
    reshape_and_cache_flash takes [num_kv_heads] scales as well as one per tensor)."""
    check_tensor("slot_mapping", slot_mapping, dtypes=INDEX_DTYPES, ndim=1)
    if slot_mapping.shape[0] > tokens:
        raise ValueError(f"slot_mapping: {slot_mapping.shape[0]} slots for {tokens} tokens")
    check_slots("slot_mapping", slot_mapping, cache.shape[0], cache.shape[1])
    if kv_cache_dtype not in SUPPORTED_KV_CACHE_DTYPES:
        raise ValueError(f"kv_cache_dtype: {kv_cache_dtype!r} not supported (fp8 caches are not); only 'auto' "
                         "(cache in the model dtype)")
    for name, scale in scales.items():
        check_tensor(name, scale, dtypes=(torch.float32,))
        if scale.numel() == 1 or (per_head is not None and tuple(scale.shape) == (per_head,)):
            continue
        allowed = "one element" + ("" if per_head is None else f" or [num_kv_heads] = [{per_head}]")
        raise ValueError(f"{name}: expected {allowed}, got shape {tuple(scale.shape)}")


def _validate_flash(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                    slot_mapping: torch.Tensor, kv_cache_dtype: str, k_scale: torch.Tensor, v_scale: torch.Tensor) -> None:
    check_tensor("key", key, dtypes=FLOAT_DTYPES, ndim=3)
    check_tensor("value", value, dtypes=FLOAT_DTYPES, ndim=3)
    check_tensor("key_cache", key_cache, dtypes=FLOAT_DTYPES, ndim=4)
    check_tensor("value_cache", value_cache, dtypes=FLOAT_DTYPES, ndim=4)
    check_same_device(key=key, value=value, key_cache=key_cache, value_cache=value_cache, slot_mapping=slot_mapping,
                      k_scale=k_scale, v_scale=v_scale)
    check_same_dtype(key=key, value=value, key_cache=key_cache, value_cache=value_cache)
    check_shape("value", value, key.shape, "same as key")
    if tuple(key_cache.shape[2:]) != tuple(key.shape[1:]):
        raise ValueError(f"key_cache: [num_kv_heads, head_size] {tuple(key_cache.shape[2:])} differs from key's {tuple(key.shape[1:])}")
    check_shape("value_cache", value_cache, key_cache.shape, "same as key_cache")
    _check_common(slot_mapping, key.shape[0], key_cache, kv_cache_dtype, {"k_scale": k_scale, "v_scale": v_scale},
                  per_head=key_cache.shape[2])


def _validate_mla(kv_c: torch.Tensor, k_pe: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
                  kv_cache_dtype: str, scale: torch.Tensor) -> None:
    check_tensor("kv_c", kv_c, dtypes=FLOAT_DTYPES, ndim=2)
    check_tensor("k_pe", k_pe, dtypes=FLOAT_DTYPES, ndim=(2, 3))
    check_tensor("kv_cache", kv_cache, dtypes=FLOAT_DTYPES, ndim=3)
    check_same_device(kv_c=kv_c, k_pe=k_pe, kv_cache=kv_cache, slot_mapping=slot_mapping, scale=scale)
    check_same_dtype(kv_c=kv_c, k_pe=k_pe, kv_cache=kv_cache)
    if k_pe.dim() == 3 and k_pe.shape[1] != 1:
        raise ValueError(f"k_pe: expected [tokens, rope_dim] or [tokens, 1, rope_dim], got {tuple(k_pe.shape)}")
    if k_pe.shape[0] != kv_c.shape[0]:
        raise ValueError(f"k_pe: has {k_pe.shape[0]} tokens, kv_c has {kv_c.shape[0]}")
    width = kv_c.shape[1] + k_pe.shape[-1]
    if kv_cache.shape[2] != width:
        raise ValueError(f"kv_cache: last dim {kv_cache.shape[2]} must be kv_lora_rank + rope_dim = {width}")
    _check_common(slot_mapping, kv_c.shape[0], kv_cache, kv_cache_dtype, {"scale": scale})


RESHAPE_AND_CACHE_FLASH_SCHEMA = ("(Tensor key, Tensor value, Tensor! key_cache, Tensor! value_cache, "
                                  "Tensor slot_mapping, str kv_cache_dtype, Tensor k_scale, Tensor v_scale) -> ()")
reshape_and_cache_flash_op = register_op("reshape_and_cache_flash", RESHAPE_AND_CACHE_FLASH_SCHEMA,
                                         validate=_validate_flash)
_reshape_and_cache_flash_unchecked = unchecked("reshape_and_cache_flash")

CONCAT_AND_CACHE_MLA_SCHEMA = ("(Tensor kv_c, Tensor k_pe, Tensor! kv_cache, Tensor slot_mapping, str kv_cache_dtype, "
                               "Tensor scale) -> ()")
concat_and_cache_mla_op = register_op("concat_and_cache_mla", CONCAT_AND_CACHE_MLA_SCHEMA, validate=_validate_mla)


def _unit_scale(like: torch.Tensor) -> torch.Tensor:
    return torch.ones((), dtype=torch.float32, device=like.device)


def reshape_and_cache_flash(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                            slot_mapping: torch.Tensor, kv_cache_dtype: str = "auto", k_scale: torch.Tensor | None = None,
                            v_scale: torch.Tensor | None = None, *,
                            validate: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Write key/value [T, num_kv_heads, head_size] (token and head strides free) into the paged
    caches [num_blocks, block_size, num_kv_heads, head_size] (same dtype) at slot_mapping [S ≤ T]
    (int32/int64; slot = block · block_size + offset, −1 = padding, skipped). A slot outside
    [0, num_blocks · block_size) is skipped too, never written (ASCENDTILE_CHECK_INDICES=1 raises
    instead). k_scale / v_scale: fp32, one element or one per KV head [num_kv_heads] (vLLM's
    forms); kv_cache_dtype "auto" stores the values as they are, so the scales are checked, not
    applied, and an fp8 cache dtype is refused. Returns the caches.
    validate=False: no argument checks (`_registry.unchecked`: for callers valid by construction)."""
    k_scale = _unit_scale(key) if k_scale is None else k_scale
    v_scale = _unit_scale(key) if v_scale is None else v_scale
    op = reshape_and_cache_flash_op if validate else _reshape_and_cache_flash_unchecked
    op(key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype, k_scale, v_scale)
    return key_cache, value_cache


def concat_and_cache_mla(kv_c: torch.Tensor, k_pe: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
                         kv_cache_dtype: str = "auto", scale: torch.Tensor | None = None) -> torch.Tensor:
    """Write cat(kv_c [T, kv_lora_rank], k_pe [T, rope_dim] or [T, 1, rope_dim]) into the latent
    cache [num_blocks, block_size, kv_lora_rank + rope_dim] (same dtype) at slot_mapping [S ≤ T]
    (int32/int64, −1 skipped; a slot outside [0, num_blocks · block_size) is skipped too, or raises
    with ASCENDTILE_CHECK_INDICES=1). Token rows may be strided. Returns kv_cache."""
    scale = _unit_scale(kv_c) if scale is None else scale
    concat_and_cache_mla_op(kv_c, k_pe, kv_cache, slot_mapping, kv_cache_dtype, scale)
    return kv_cache
