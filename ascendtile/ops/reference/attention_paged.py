"""Reference: paged_attention (decode, also the CPU path; see _attention.py)."""
from __future__ import annotations

import torch

from ascendtile.ops.reference._attention import decode


def paged_attention(out: torch.Tensor, query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                    block_tables: torch.Tensor, seq_lens: torch.Tensor, scale: float, softcap: float,
                    sliding_window: int, kv_cache_dtype: str = "auto", k_scale: torch.Tensor | None = None,
                    v_scale: torch.Tensor | None = None) -> None:
    if query.shape[0] == 0:
        return
    scales = (k_scale, v_scale) if kv_cache_dtype == "int8" else (None, None)
    decode(out, query, key_cache, value_cache, block_tables, seq_lens.long(), scale, softcap, sliding_window, *scales)
