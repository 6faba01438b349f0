"""The int8 KV cache's arithmetic (contract: ops/_kv_quant.py), shared by the references of the
cache writers (kv_cache) and of the attention ops that read the cache: quantize the rows being
written, and dequantize only the rows an attention call gathers (never the whole cache).

Symmetric int8 in [-127, 127], rounding half to even (torch.round; the kernels use
kernels/_int8.round_half_even). Dynamic: scale = max|row| / 127 in fp32, values row / scale; an
all-zero row gets scale 0 and values 0; a row with NaN or ±inf gets scale NaN and values 0.
Static: values x / scale, saturated, NaN stored as 0.
"""
from __future__ import annotations

import torch

LIMIT = 127.0


def quantize_dynamic(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows x [..., D] (any float dtype) -> (int8 values [..., D], fp32 scales [...])."""
    xf = x.float()
    finite = xf.isfinite().all(-1)
    # a tensor divisor: CUDA torch multiplies by a host scalar's reciprocal (ops/reference/quant.py)
    scale = torch.where(finite, xf.abs().amax(-1) / xf.new_tensor(LIMIT), float("nan"))
    divisor = torch.where(scale > 0, scale, 1.0)  # zero rows (and NaN-scale rows, zeroed below)
    q = torch.round(xf / divisor[..., None]).clamp_(-LIMIT, LIMIT)
    return q.masked_fill_(~finite[..., None], 0.0).to(torch.int8), scale


def quantize_static(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x [..., D] / scale (broadcast against x[..., 0], e.g. [num_kv_heads] against [T, KVH, D]),
    rounded, saturated to ±127, NaN -> 0; int8."""
    q = torch.round(x.float() / scale[..., None]).clamp_(-LIMIT, LIMIT)
    return q.nan_to_num_(0.0).to(torch.int8)


def static_scale(scale: torch.Tensor, heads: int) -> torch.Tensor:
    """A static scale (one element, or [heads]) as [heads] fp32."""
    return scale.float().reshape(-1).expand(heads)


def dequantize(values: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """int8 values [..., D] · fp32 scales [...] (or broadcastable to it) -> fp32 [..., D]: one
    multiply (int8 · fp32 promotes to fp32), no separate conversion pass."""
    return torch.mul(values, scales[..., None])


def block_scales(scale_cache: torch.Tensor, ids: torch.Tensor, num_k: int) -> torch.Tensor:
    """Scales of the rows gathered block by block: scale_cache [num_blocks, R, block_size]
    (R = KV heads, or MLA's parts), ids [B, blocks] in range -> [B, num_k, R] (a copy of only
    those blocks' scales)."""
    batch, blocks = ids.shape
    rows = scale_cache.index_select(0, ids.flatten()).view(batch, blocks, *scale_cache.shape[1:])
    return rows.transpose(2, 3).reshape(batch, blocks * scale_cache.shape[2], scale_cache.shape[1])[:, :num_k]


def slot_scales(scale_cache: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """Scales of the rows at flat cache slots [N] int64 (block · block_size + offset, in range)
    -> [N, R]: one torch.take over the contiguous scale cache."""
    rows, block_size = scale_cache.shape[1:]
    base = (slots // block_size) * (rows * block_size) + slots % block_size
    return torch.take(scale_cache, base[:, None] + torch.arange(rows, device=slots.device) * block_size)
