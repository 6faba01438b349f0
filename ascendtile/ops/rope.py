"""Op: rotary_embedding (vLLM argument order and semantics)."""
from __future__ import annotations

import torch

from ascendtile.ops._indices import check_positions
from ascendtile.ops._registry import register_op, unchecked
from ascendtile.ops._validate import FLOAT_DTYPES, INDEX_DTYPES, check_same_device, check_same_dtype, check_tensor


def _check_heads(name: str, t: torch.Tensor, head_size: int, tokens: tuple[int, ...]) -> None:
    """t is [*tokens, H*D] or [*tokens, H, D], tokens = positions' shape ([T] or [B, S])."""
    check_tensor(name, t, dtypes=FLOAT_DTYPES)
    lead = len(tokens)
    if t.dim() not in (lead + 1, lead + 2):
        form = "[T, H*D] or [T, H, D]" if lead == 1 else "[B, S, H*D] or [B, S, H, D]"
        raise ValueError(f"{name}: expected {form} for positions of shape {tokens}, got shape {tuple(t.shape)}")
    if tuple(t.shape[:lead]) != tokens:
        raise ValueError(f"{name}: token dims {tuple(t.shape[:lead])} differ from positions' shape {tokens}")
    if t.dim() == lead + 2 and t.shape[-1] != head_size:
        raise ValueError(f"{name}: last dim {t.shape[-1]} differs from head_size {head_size}")
    if t.dim() == lead + 1 and t.shape[-1] % head_size:
        raise ValueError(f"{name}: width {t.shape[-1]} is not a multiple of head_size {head_size}")


def _validate(positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor | None, head_size: int,
              cos_sin_cache: torch.Tensor, is_neox: bool, rope_dim_offset: int = 0,
              inverse: bool = False) -> None:
    check_tensor("positions", positions, dtypes=INDEX_DTYPES, ndim=(1, 2))
    check_tensor("cos_sin_cache", cos_sin_cache, dtypes=FLOAT_DTYPES, ndim=2, contiguous=True)
    check_same_device(query=query, positions=positions, key=key, cos_sin_cache=cos_sin_cache)
    if head_size <= 0:
        raise ValueError(f"head_size: must be > 0, got {head_size}")
    tokens = tuple(positions.shape)
    _check_heads("query", query, head_size, tokens)
    if key is not None:
        _check_heads("key", key, head_size, tokens)
        check_same_dtype(query=query, key=key)
    rot_dim = cos_sin_cache.shape[1]
    if rot_dim % 2 or not 0 < rot_dim <= head_size:
        raise ValueError(f"cos_sin_cache: rot_dim {rot_dim} must be even and in (0, head_size={head_size}]")
    if rope_dim_offset < 0 or rope_dim_offset + rot_dim > head_size:
        raise ValueError(f"rope_dim_offset: {rope_dim_offset} must be >= 0 with rope_dim_offset + rot_dim "
                         f"({rot_dim}) <= head_size ({head_size})")
    check_positions("positions", positions, cos_sin_cache.shape[0])


ROTARY_EMBEDDING_SCHEMA = ("(Tensor positions, Tensor! query, Tensor!? key, int head_size, Tensor cos_sin_cache, "
                           "bool is_neox, int rope_dim_offset=0, bool inverse=False) -> ()")
rotary_embedding_op = register_op("rotary_embedding", ROTARY_EMBEDDING_SCHEMA, validate=_validate)
_rotary_embedding_unchecked = unchecked("rotary_embedding")


def rotary_embedding(positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor | None, head_size: int,
                     cos_sin_cache: torch.Tensor, is_neox: bool, rope_dim_offset: int = 0, inverse: bool = False,
                     *, validate: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Rotate dims [rope_dim_offset, rope_dim_offset + rot_dim) of every head of query and key
    (its own head count, or None) in place, at positions (int32/int64) of shape [T] or [B, S]
    (vLLM's two forms): query/key are [T, H*D] or [T, H, D], or [B, S, H*D] or [B, S, H, D] (the
    same result as the B*S tokens flattened). cos_sin_cache [max_position, rot_dim] = cat(cos, sin)
    (any float dtype; math in fp32). is_neox: rotate the halves (x[:r/2], x[r/2:r]) of the rotated
    span; False: its interleaved pairs (GPT-J, DeepSeek). Dims outside the span are not touched:
    rope_dim_offset 0 (default) rotates the first rot_dim, head_size - rot_dim the last (vLLM's
    DeepSeek-V4 scaling rope); 0 <= rope_dim_offset and rope_dim_offset + rot_dim <= head_size, else
    ValueError. inverse: rotate by -theta (sin negated), undoing the rotation at the same positions.
    A token whose position is outside [0, max_position) is left unrotated: its query and key rows
    are not touched (ASCENDTILE_CHECK_INDICES=1 raises instead). Token rows may be strided (slices
    of a fused qkv; any batch stride); returns (query, key) for chaining.
    validate=False: no argument checks (`_registry.unchecked`: for callers valid by construction)."""
    op = rotary_embedding_op if validate else _rotary_embedding_unchecked
    op(positions, query, key, head_size, cos_sin_cache, is_neox, rope_dim_offset, inverse)
    return query, key
