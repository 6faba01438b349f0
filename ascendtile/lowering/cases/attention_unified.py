"""unified_attention: the paged flash kernel over every layout, as a decode step (1 query row)
and as a 512-token prefill chunk with softcap and window."""
from __future__ import annotations

from ascendtile.kernels.attention_unified import flash_attention_kernel, tiling
from ascendtile.lowering.case import LoweringCase
from ascendtile.lowering.cases._attention import flash_types, paged_layouts
from ascendtile.lowering.shape_grid import DTYPES


def cases() -> list[LoweringCase]:
    cases = []
    # the largest query tiles check_query_tile admits: MQA 64 / 1 at 128 dims, 16 / 1 at 256
    for heads, kv_heads, head_size, block_size in paged_layouts([(64, 1, 128, 128), (16, 1, 256, 128)]):
        for max_q, dtype in ((1, DTYPES[0]), (512, DTYPES[1])):
            params = tiling(heads, kv_heads, head_size, block_size, max_q)
            cases.append(LoweringCase(
                name=(f"unified_attention[h={heads}/{kv_heads},d={head_size},bs={block_size},"
                      f"m={params['BLOCK_M']},{dtype}]"),
                kernel=flash_attention_kernel,
                arg_types=flash_types(dtype),
                constexprs={**params, "PAGED": True, "CAUSAL": True, "USE_SOFTCAP": max_q > 1,
                            "USE_WINDOW": max_q > 1, "UPCAST_DOT": False},
                expect_mode="mix",
            ))
    return cases
