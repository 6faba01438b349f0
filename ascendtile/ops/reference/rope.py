"""Reference: rotary_embedding (vLLM semantics), fp32 math rounded once to the tensor dtype. A
token whose position is outside [0, cos_sin_cache rows) is left unrotated, as in the kernel.
positions [T] or [B, S]; query/key lead with the same token dims. Each head rotates its dims
[rope_dim_offset, rope_dim_offset + rot_dim); inverse negates sin (rotation by -theta)."""
from __future__ import annotations

import torch


def _rotated(xf: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, is_neox: bool) -> torch.Tensor:
    """fp32 rot dims xf [*tokens, H, rot_dim] rotated by cos/sin [*tokens, 1, rot_dim / 2]."""
    if is_neox:  # rotate halves: (x[:r/2], x[r/2:r])
        x1, x2 = xf.chunk(2, dim=-1)
    else:  # GPT-J: interleaved pairs (x[0::2], x[1::2])
        x1, x2 = xf[..., 0::2], xf[..., 1::2]
    o1 = x1 * cos - x2 * sin
    o2 = x2 * cos + x1 * sin
    return torch.cat((o1, o2), -1) if is_neox else torch.stack((o1, o2), -1).flatten(-2)


def _rotate(heads: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, is_neox: bool, offset: int) -> None:
    """Rotate dims [offset, offset + rot_dim) of heads [*tokens, H, D] in place by cos/sin
    [*tokens, 1, rot_dim / 2]."""
    rot = heads[..., offset : offset + 2 * cos.shape[-1]]
    rot.copy_(_rotated(rot.float(), cos, sin, is_neox))


def _rotate_tokens(heads: torch.Tensor, valid: torch.Tensor | None, cos: torch.Tensor, sin: torch.Tensor,
                   is_neox: bool, offset: int) -> None:
    """Rotate the tokens of heads [*tokens, H, D] where `valid` (None: every token) in place."""
    if valid is None:
        _rotate(heads, cos, sin, is_neox, offset)
        return
    rows = heads[valid]  # [valid tokens, H, D], a copy
    _rotate(rows, cos, sin, is_neox, offset)
    heads[valid] = rows


def rotary_embedding(positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor | None, head_size: int,
                     cos_sin_cache: torch.Tensor, is_neox: bool, rope_dim_offset: int = 0,
                     inverse: bool = False) -> None:
    token_dims = positions.dim()
    valid = None  # every token; else a mask of the tokens at valid positions, the only ones rotated
    rows = cos_sin_cache.shape[0]
    if positions.numel() and (int(positions.min()) < 0 or int(positions.max()) >= rows):
        valid = (positions >= 0) & (positions < rows)
        positions = positions[valid]
    cos, sin = cos_sin_cache[positions].float().unsqueeze(-2).chunk(2, dim=-1)  # [*tokens, 1, rot_dim / 2]
    if inverse:
        sin = -sin
    for x in (query, key):
        if x is not None:  # [*tokens, H*D] is viewed as [*tokens, H, D] (its last dim is contiguous)
            heads = x.unflatten(-1, (-1, head_size)) if x.dim() == token_dims + 1 else x
            _rotate_tokens(heads, valid, cos, sin, is_neox, rope_dim_offset)


def rotary_embedding_traceable(positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor | None, head_size: int,
                               cos_sin_cache: torch.Tensor, is_neox: bool, rope_dim_offset: int = 0,
                               inverse: bool = False) -> None:
    """rotary_embedding with positions [T] for a traced graph (compilation/decompose.py): the same
    values, with no host read and no shape that depends on values. Every token is rotated by a
    clamped cache row and a token outside the cache keeps its values through a select; the write
    is an index_copy_ of every token row, because a copy_ into the strided head view makes the
    trace itself guard on the token count (Inductor's reinplacing of the write still guards on a
    count of one or more: compiled_model.py)."""
    rows = cos_sin_cache.shape[0]
    valid = ((positions >= 0) & (positions < rows))[:, None, None]
    cos, sin = cos_sin_cache.index_select(0, positions.clamp(0, rows - 1)).float().unsqueeze(-2).chunk(2, dim=-1)
    if inverse:
        sin = -sin
    every_token = torch.arange(positions.shape[0], device=positions.device)
    for x in (query, key):
        if x is not None:
            heads = x.unflatten(-1, (-1, head_size)) if x.dim() == 2 else x
            rot = heads[..., rope_dim_offset : rope_dim_offset + 2 * cos.shape[-1]]
            xf = rot.float()
            rot.index_copy_(0, every_token, torch.where(valid, _rotated(xf, cos, sin, is_neox), xf).to(rot.dtype))
