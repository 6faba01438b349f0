"""flash_attention_varlen: the flash kernel without a paged cache, SmolLM2 heads (9 / 3: a GQA
group padded 3 -> 4), each head size, causal and not."""
from __future__ import annotations

from ascendtile.kernels._attention import KV_FLOAT
from ascendtile.kernels.attention_unified import DENSE_BLOCK, flash_attention_kernel, tiling
from ascendtile.lowering.case import LoweringCase
from ascendtile.lowering.cases._attention import flash_types
from ascendtile.lowering.shape_grid import ATTENTION_HEAD_SIZES, DTYPES


def cases() -> list[LoweringCase]:
    cases = []
    for i, head_size in enumerate(ATTENTION_HEAD_SIZES):
        dtype = DTYPES[i % len(DTYPES)]
        params = tiling(9, 3, head_size, DENSE_BLOCK, 512)
        for causal in (True, False):
            cases.append(LoweringCase(
                name=f"flash_attention_varlen[h=9/3,d={head_size},causal={causal},{dtype}]",
                kernel=flash_attention_kernel,
                arg_types=flash_types(dtype),
                constexprs={**params, "PAGED": False, "CAUSAL": causal, "USE_SOFTCAP": False,
                            "USE_WINDOW": False, "UPCAST_DOT": False, "KV_QUANT": KV_FLOAT},
                expect_mode="mix",
            ))
    return cases
