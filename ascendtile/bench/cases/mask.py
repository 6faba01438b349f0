"""causal_mask for padded batches: prefill chunks over a cached context, and a long prompt."""
from __future__ import annotations

import torch

from ascendtile.bench.cases import KernelCase, bench_cases, element_size

# (batch, max new tokens, max KV length): 8 chunked-prefill rows over context, one 2k prompt.
SHAPES = ((8, 256, 1024), (1, 2048, 2048))
QUICK_SHAPES = ((3, 7, 19),)


def _causal_mask(batch: int, max_q: int, max_kv: int, dtype: torch.dtype) -> KernelCase:
    def setup(device):
        q_lens = torch.randint(1, max_q + 1, (batch,), dtype=torch.int32, device=device)
        q_lens[0] = max_q
        kv_lens = q_lens + torch.randint(0, max_kv - max_q + 1, (batch,), dtype=torch.int32, device=device)
        out = torch.empty(batch, max_q, max_kv, dtype=dtype, device=device)
        return lambda: torch.ops.ascend.causal_mask(out, q_lens, kv_lens, float("-inf"), 0)

    return KernelCase(
        "mask", "causal_mask", {"batch": batch, "max_q": max_q, "max_kv": max_kv}, dtype,
        bytes_moved=batch * max_q * max_kv * element_size(dtype) + 2 * batch * 4,  # write the mask, read the lengths
        flops=0, setup=setup,
    )


@bench_cases("mask")
def _cases(dtype: torch.dtype, quick: bool) -> list[KernelCase]:
    return [_causal_mask(*shape, dtype) for shape in (QUICK_SHAPES if quick else SHAPES)]
