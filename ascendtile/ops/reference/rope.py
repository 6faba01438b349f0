"""Reference: rotary_embedding (vLLM semantics), fp32 math rounded once to the tensor dtype. A
token whose position is outside [0, cos_sin_cache rows) is left unrotated, as in the kernel."""
from __future__ import annotations

import torch


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, head_size: int, is_neox: bool) -> None:
    heads = x.unflatten(-1, (-1, head_size)) if x.dim() == 2 else x  # [T, H, D] view
    rot = heads[..., : 2 * cos.shape[-1]]
    xf = rot.float()
    if is_neox:  # rotate halves: (x[:r/2], x[r/2:r])
        x1, x2 = xf.chunk(2, dim=-1)
    else:  # GPT-J: interleaved pairs (x[0::2], x[1::2])
        x1, x2 = xf[..., 0::2], xf[..., 1::2]
    o1 = x1 * cos - x2 * sin
    o2 = x2 * cos + x1 * sin
    rot.copy_(torch.cat((o1, o2), -1) if is_neox else torch.stack((o1, o2), -1).flatten(-2))


def _rotate_tokens(x: torch.Tensor, tokens: torch.Tensor | None, cos: torch.Tensor, sin: torch.Tensor,
                   head_size: int, is_neox: bool) -> None:
    """Rotate x's rows `tokens` (None: every row) in place."""
    if tokens is None:
        _rotate(x, cos, sin, head_size, is_neox)
        return
    rows = x.index_select(0, tokens)
    _rotate(rows, cos, sin, head_size, is_neox)
    x.index_copy_(0, tokens, rows)


def rotary_embedding(positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor | None, head_size: int,
                     cos_sin_cache: torch.Tensor, is_neox: bool) -> None:
    tokens = None  # every token; else the tokens at valid positions, the only ones rotated
    rows = cos_sin_cache.shape[0]
    if positions.numel() and (int(positions.min()) < 0 or int(positions.max()) >= rows):
        tokens = ((positions >= 0) & (positions < rows)).nonzero().squeeze(1)
        positions = positions.index_select(0, tokens)
    cos, sin = cos_sin_cache.index_select(0, positions).float()[:, None, :].chunk(2, dim=-1)  # [T, 1, rot_dim / 2]
    _rotate_tokens(query, tokens, cos, sin, head_size, is_neox)
    if key is not None:
        _rotate_tokens(key, tokens, cos, sin, head_size, is_neox)
