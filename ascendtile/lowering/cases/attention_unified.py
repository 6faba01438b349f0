"""unified_attention: the paged flash kernel over every layout, as a decode step (1 query row)
and as a 512-token prefill chunk with softcap and window; over a float cache, and over an int8
cache (dynamic per-token scales at every layout, static per-head scales for the largest tiles)."""
from __future__ import annotations

from ascendtile.kernels._attention import KV_FLOAT, KV_INT8_DYNAMIC, KV_INT8_STATIC
from ascendtile.kernels.attention_unified import flash_attention_kernel, tiling
from ascendtile.lowering.case import LoweringCase
from ascendtile.lowering.cases._attention import flash_types, int8_layouts, paged_layouts
from ascendtile.lowering.shape_grid import DTYPES

# the largest query tiles check_query_tile admits: MQA 64 / 1 at 128 dims, 16 / 1 at 256
LARGEST = [(64, 1, 128, 128), (16, 1, 256, 128)]
KV_NAMES = {KV_FLOAT: "", KV_INT8_STATIC: ",int8-static", KV_INT8_DYNAMIC: ",int8-dynamic"}


def _case(heads: int, kv_heads: int, head_size: int, block_size: int, max_q: int, dtype: str,
          kv_quant: int) -> LoweringCase:
    params = tiling(heads, kv_heads, head_size, block_size, max_q, kv_quant != KV_FLOAT)
    return LoweringCase(
        name=(f"unified_attention[h={heads}/{kv_heads},d={head_size},bs={block_size},"
              f"m={params['BLOCK_M']},{dtype}{KV_NAMES[kv_quant]}]"),
        kernel=flash_attention_kernel,
        arg_types=flash_types(dtype, int8=kv_quant != KV_FLOAT),
        constexprs={**params, "PAGED": True, "CAUSAL": True, "USE_SOFTCAP": max_q > 1,
                    "USE_WINDOW": max_q > 1, "UPCAST_DOT": False, "KV_QUANT": kv_quant},
        expect_mode="mix",
    )


def cases() -> list[LoweringCase]:
    cases = []
    steps = ((1, DTYPES[0]), (512, DTYPES[1]))
    for layout in paged_layouts(LARGEST):
        cases += [_case(*layout, max_q, dtype, KV_FLOAT) for max_q, dtype in steps]
    for layout in int8_layouts(LARGEST):
        cases += [_case(*layout, max_q, dtype, KV_INT8_DYNAMIC) for max_q, dtype in steps]
    for layout in LARGEST:
        cases += [_case(*layout, max_q, dtype, KV_INT8_STATIC) for max_q, dtype in steps]
    return cases
