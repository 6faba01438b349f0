"""Reference: causal_mask (bottom-right aligned, optional sliding window, padding filled)."""
from __future__ import annotations

import torch


def causal_mask(out: torch.Tensor, q_lens: torch.Tensor, kv_lens: torch.Tensor, fill_value: float,
                sliding_window: int) -> None:
    _, max_q, max_kv = out.shape
    i = torch.arange(max_q, device=out.device)[None, :, None]
    j = torch.arange(max_kv, device=out.device)[None, None, :]
    q_len, kv_len = q_lens.long()[:, None, None], kv_lens.long()[:, None, None]
    last = i + kv_len - q_len  # the newest key query i may see
    visible = (i < q_len) & (j < kv_len) & (j <= last)
    if sliding_window > 0:
        visible &= j > last - sliding_window
    out.copy_(torch.where(visible, 0.0, fill_value))
