"""Op: causal_mask (additive attention mask for a padded batch, bottom-right aligned)."""
from __future__ import annotations

import torch

from ascendtile.ops._registry import register_op
from ascendtile.ops._validate import FLOAT_DTYPES, INDEX_DTYPES, check_same_device, check_shape, check_tensor


def _validate(out: torch.Tensor, q_lens: torch.Tensor, kv_lens: torch.Tensor, fill_value: float, sliding_window: int) -> None:
    check_tensor("out", out, dtypes=FLOAT_DTYPES, ndim=3)
    check_tensor("q_lens", q_lens, dtypes=INDEX_DTYPES, ndim=1)
    check_tensor("kv_lens", kv_lens, dtypes=INDEX_DTYPES, ndim=1)
    check_same_device(out=out, q_lens=q_lens, kv_lens=kv_lens)
    check_shape("q_lens", q_lens, (out.shape[0],), "one length per batch row of out")
    check_shape("kv_lens", kv_lens, (out.shape[0],), "one length per batch row of out")


CAUSAL_MASK_SCHEMA = "(Tensor! out, Tensor q_lens, Tensor kv_lens, float fill_value, int sliding_window) -> ()"
causal_mask_op = register_op("causal_mask", CAUSAL_MASK_SCHEMA, validate=_validate)


def causal_mask(q_lens: torch.Tensor, kv_lens: torch.Tensor, max_q: int | None = None, max_kv: int | None = None,
                dtype: torch.dtype = torch.float32, fill_value: float = float("-inf"),
                sliding_window: int = 0) -> torch.Tensor:
    """Additive mask [B, max_q, max_kv] (fp16/bf16/fp32) for q_lens/kv_lens [B] (int32/int64):
    0 where key j is visible to query i, i.e. i < q_len, j < kv_len, j ≤ i + kv_len − q_len
    (bottom-right aligned: the last query sees the last key) and, with sliding_window w > 0,
    j > i + kv_len − q_len − w (the query's own position and the w − 1 before it, the HF/vLLM
    convention); fill_value elsewhere, padding rows/columns included. max_q/max_kv default to the
    largest lengths (a host sync)."""
    max_q = int(q_lens.max()) if max_q is None else max_q
    max_kv = int(kv_lens.max()) if max_kv is None else max_kv
    out = torch.empty((q_lens.shape[0], max_q, max_kv), dtype=dtype, device=q_lens.device)
    causal_mask_op(out, q_lens, kv_lens, fill_value, sliding_window)
    return out
