"""Ops: reshape_and_cache_flash (MHA/GQA paged cache), concat_and_cache_mla (latent cache)."""
from __future__ import annotations

import torch

from ascendtile.ops._indices import check_slots
from ascendtile.ops._kv_quant import (
    MLA_SCALE_PARTS, check_cache_dtype, check_kv_cache_dtype, check_scale_cache, check_static_scale,
)
from ascendtile.ops._registry import register_op, unchecked
from ascendtile.ops._validate import FLOAT_DTYPES, INDEX_DTYPES, check_same_device, check_same_dtype, check_shape, check_tensor


def _check_slots(slot_mapping: torch.Tensor, tokens: int, cache: torch.Tensor) -> None:
    check_tensor("slot_mapping", slot_mapping, dtypes=INDEX_DTYPES, ndim=1)
    if slot_mapping.shape[0] > tokens:
        raise ValueError(f"slot_mapping: {slot_mapping.shape[0]} slots for {tokens} tokens")
    check_slots("slot_mapping", slot_mapping, cache.shape[0], cache.shape[1])


def _check_scale_caches(int8: bool, caches: dict[str, torch.Tensor | None], cache: torch.Tensor, rows: int,
                        rows_name: str) -> None:
    """Dynamic scale caches: all given or none, and only with kv_cache_dtype "int8"."""
    given = [name for name, c in caches.items() if c is not None]
    if given and not int8:
        raise ValueError(f"{given[0]}: scale caches are written only with kv_cache_dtype 'int8'")
    if given and len(given) != len(caches):
        missing = next(name for name in caches if name not in given)
        raise ValueError(f"{missing}: None while {given[0]} is given; pass both (dynamic) or neither (static)")
    for name in given:
        check_scale_cache(name, caches[name], cache.shape[0], rows, cache.shape[1], rows_name)


def _validate_flash(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                    slot_mapping: torch.Tensor, kv_cache_dtype: str, k_scale: torch.Tensor, v_scale: torch.Tensor,
                    k_scale_cache: torch.Tensor | None = None, v_scale_cache: torch.Tensor | None = None) -> None:
    int8 = check_kv_cache_dtype(kv_cache_dtype)
    check_tensor("key", key, dtypes=FLOAT_DTYPES, ndim=3)
    check_tensor("value", value, dtypes=FLOAT_DTYPES, ndim=3)
    check_cache_dtype("key_cache", key_cache, int8, 4)
    check_cache_dtype("value_cache", value_cache, int8, 4)
    check_same_device(key=key, value=value, key_cache=key_cache, value_cache=value_cache, slot_mapping=slot_mapping,
                      k_scale=k_scale, v_scale=v_scale, k_scale_cache=k_scale_cache, v_scale_cache=v_scale_cache)
    # int8 caches hold a float key/value's quantized values
    check_same_dtype(key=key, value=value, **({} if int8 else {"key_cache": key_cache, "value_cache": value_cache}))
    check_shape("value", value, key.shape, "same as key")
    if tuple(key_cache.shape[2:]) != tuple(key.shape[1:]):
        raise ValueError(f"key_cache: [num_kv_heads, head_size] {tuple(key_cache.shape[2:])} differs from key's {tuple(key.shape[1:])}")
    check_shape("value_cache", value_cache, key_cache.shape, "same as key_cache")
    _check_slots(slot_mapping, key.shape[0], key_cache)
    check_static_scale("k_scale", k_scale, key_cache.shape[2])
    check_static_scale("v_scale", v_scale, key_cache.shape[2])
    _check_scale_caches(int8, {"k_scale_cache": k_scale_cache, "v_scale_cache": v_scale_cache}, key_cache,
                        key_cache.shape[2], "num_kv_heads")


def _validate_mla(kv_c: torch.Tensor, k_pe: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
                  kv_cache_dtype: str, scale: torch.Tensor, scale_cache: torch.Tensor | None = None) -> None:
    int8 = check_kv_cache_dtype(kv_cache_dtype)
    check_tensor("kv_c", kv_c, dtypes=FLOAT_DTYPES, ndim=2)
    check_tensor("k_pe", k_pe, dtypes=FLOAT_DTYPES, ndim=(2, 3))
    check_cache_dtype("kv_cache", kv_cache, int8, 3)
    check_same_device(kv_c=kv_c, k_pe=k_pe, kv_cache=kv_cache, slot_mapping=slot_mapping, scale=scale,
                      scale_cache=scale_cache)
    check_same_dtype(kv_c=kv_c, k_pe=k_pe, **({} if int8 else {"kv_cache": kv_cache}))  # int8: quantized
    if k_pe.dim() == 3 and k_pe.shape[1] != 1:
        raise ValueError(f"k_pe: expected [tokens, rope_dim] or [tokens, 1, rope_dim], got {tuple(k_pe.shape)}")
    if k_pe.shape[0] != kv_c.shape[0]:
        raise ValueError(f"k_pe: has {k_pe.shape[0]} tokens, kv_c has {kv_c.shape[0]}")
    width = kv_c.shape[1] + k_pe.shape[-1]
    if kv_cache.shape[2] != width:
        raise ValueError(f"kv_cache: last dim {kv_cache.shape[2]} must be kv_lora_rank + rope_dim = {width}")
    _check_slots(slot_mapping, kv_c.shape[0], kv_cache)
    check_static_scale("scale", scale, None)
    _check_scale_caches(int8, {"scale_cache": scale_cache}, kv_cache, MLA_SCALE_PARTS, "2 (latent, rope)")


RESHAPE_AND_CACHE_FLASH_SCHEMA = ("(Tensor key, Tensor value, Tensor! key_cache, Tensor! value_cache, "
                                  "Tensor slot_mapping, str kv_cache_dtype, Tensor k_scale, Tensor v_scale, "
                                  "Tensor!? k_scale_cache=None, Tensor!? v_scale_cache=None) -> ()")
reshape_and_cache_flash_op = register_op("reshape_and_cache_flash", RESHAPE_AND_CACHE_FLASH_SCHEMA,
                                         validate=_validate_flash)
_reshape_and_cache_flash_unchecked = unchecked("reshape_and_cache_flash")

CONCAT_AND_CACHE_MLA_SCHEMA = ("(Tensor kv_c, Tensor k_pe, Tensor! kv_cache, Tensor slot_mapping, str kv_cache_dtype, "
                               "Tensor scale, Tensor!? scale_cache=None) -> ()")
concat_and_cache_mla_op = register_op("concat_and_cache_mla", CONCAT_AND_CACHE_MLA_SCHEMA, validate=_validate_mla)


def _unit_scale(like: torch.Tensor) -> torch.Tensor:
    return torch.ones((), dtype=torch.float32, device=like.device)


def reshape_and_cache_flash(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                            slot_mapping: torch.Tensor, kv_cache_dtype: str = "auto", k_scale: torch.Tensor | None = None,
                            v_scale: torch.Tensor | None = None, k_scale_cache: torch.Tensor | None = None,
                            v_scale_cache: torch.Tensor | None = None, *,
                            validate: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Write key/value [T, num_kv_heads, head_size] (token and head strides free) into the paged
    caches [num_blocks, block_size, num_kv_heads, head_size] at slot_mapping [S ≤ T] (int32/int64;
    slot = block · block_size + offset, −1 = padding, skipped). A slot outside
    [0, num_blocks · block_size) is skipped too, never written (ASCENDTILE_CHECK_INDICES=1 raises
    instead). k_scale / v_scale: fp32, one element or one per KV head [num_kv_heads] (vLLM's
    forms; default 1). kv_cache_dtype "auto": the caches have key's dtype and take the values as
    they are (the scales are checked, not applied). "int8" (ops/_kv_quant.py): int8 caches; with
    k_scale_cache / v_scale_cache (fp32 [num_blocks, num_kv_heads, block_size], contiguous) each
    (token, KV head) row is quantized with its own scale max|row| / 127, written there (dynamic;
    k_scale / v_scale unused); without them with the static k_scale / v_scale. An fp8 cache dtype
    is refused. Returns the caches.
    validate=False: no argument checks (`_registry.unchecked`: for callers valid by construction)."""
    k_scale = _unit_scale(key) if k_scale is None else k_scale
    v_scale = _unit_scale(key) if v_scale is None else v_scale
    op = reshape_and_cache_flash_op if validate else _reshape_and_cache_flash_unchecked
    op(key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype, k_scale, v_scale, k_scale_cache,
       v_scale_cache)
    return key_cache, value_cache


def concat_and_cache_mla(kv_c: torch.Tensor, k_pe: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
                         kv_cache_dtype: str = "auto", scale: torch.Tensor | None = None,
                         scale_cache: torch.Tensor | None = None) -> torch.Tensor:
    """Write cat(kv_c [T, kv_lora_rank], k_pe [T, rope_dim] or [T, 1, rope_dim]) into the latent
    cache [num_blocks, block_size, kv_lora_rank + rope_dim] at slot_mapping [S ≤ T] (int32/int64,
    −1 skipped; a slot outside [0, num_blocks · block_size) is skipped too, or raises with
    ASCENDTILE_CHECK_INDICES=1). Token rows may be strided. kv_cache_dtype "auto": the cache has
    kv_c's dtype, scale (fp32, one element) is checked, not applied. "int8" (ops/_kv_quant.py): an
    int8 cache; with scale_cache (fp32 [num_blocks, 2, block_size], contiguous) the latent and the
    rope part of each token get their own scale max|part| / 127, written there (dynamic); without
    it both parts are quantized with the static scale. Returns kv_cache."""
    scale = _unit_scale(kv_c) if scale is None else scale
    concat_and_cache_mla_op(kv_c, k_pe, kv_cache, slot_mapping, kv_cache_dtype, scale, scale_cache)
    return kv_cache
