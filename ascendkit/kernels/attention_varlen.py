"""Dense varlen attention (prefill without a paged cache): q [Tq, H, D], k/v [Tk, KVH, D] with
sequences laid end to end. It is the unified attention kernel with PAGED=False: K/V tiles are
read at position-aligned rows of the sequence instead of through a block table."""
from __future__ import annotations

import torch

from ascendkit.kernels.ascend_gate import LoweringCase, lowering_cases
from ascendkit.kernels._attention import HEAD_SIZES, tile_n
from ascendkit.kernels.attention_unified import arg_types, flash_attention_kernel, launch, tiling
from ascendkit.lowering.shape_grid import DTYPES


def flash_attention_varlen(out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                           cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor, max_seqlen_q: int,
                           max_seqlen_k: int, scale: float, causal: bool) -> None:
    # cu_seqlens_k doubles as the (unused) block-table argument.
    launch(out, q, k, v, cu_seqlens_k, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, scale, 0.0, 0,
           paged=False, causal=causal)


@lowering_cases("attention_varlen")
def _cases() -> list[LoweringCase]:
    cases = []
    # SmolLM2 heads (9 / 3: a GQA group padded 3 -> 4), each head size, causal and not.
    for i, head_size in enumerate(HEAD_SIZES):
        dtype = DTYPES[i % len(DTYPES)]
        params = tiling(9, 3, head_size, 16, 512)
        params["TILE_N"] = tile_n(64, params["BLOCK_M"] * params["D_PAD"])
        for causal in (True, False):
            cases.append(LoweringCase(
                name=f"flash_attention_varlen[h=9/3,d={head_size},causal={causal},{dtype}]",
                kernel=flash_attention_kernel,
                arg_types=arg_types(dtype),
                constexprs={**params, "PAGED": False, "CAUSAL": causal, "USE_SOFTCAP": False,
                            "USE_WINDOW": False, "UPCAST_DOT": False},
                expect_mode="mix",
            ))
    return cases
