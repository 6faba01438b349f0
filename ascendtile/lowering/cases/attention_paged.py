"""paged_attention: the decode kernel over every layout (dtype, split-KV, softcap / window and
the varlen-query variant alternate across the grid), over a float cache and an int8 cache
(dynamic per-token scales at every layout, static per-head scales for the largest groups), and the
split reduce kernel."""
from __future__ import annotations

import triton

from ascendtile.kernels._attention import KV_FLOAT, KV_INT8_DYNAMIC, KV_INT8_STATIC
from ascendtile.kernels.attention_paged import MAX_SPLITS, paged_decode_kernel, paged_reduce_kernel, tiling
from ascendtile.lowering.case import LoweringCase, signature_types
from ascendtile.lowering.cases._attention import cache_types, int8_layouts, paged_layouts
from ascendtile.lowering.shape_grid import ATTENTION_HEAD_SIZES, BLOCK_SIZES, DTYPES

# the largest groups the decode kernel admits: MQA 64 / 1 at 128 dims, 16 / 1 at 256
LARGEST = [(64, 1, 128, 128), (16, 1, 256, 64)]
KV_NAMES = {KV_FLOAT: "", KV_INT8_STATIC: ",int8-static", KV_INT8_DYNAMIC: ",int8-dynamic"}


def _decode_case(heads: int, kv_heads: int, head_size: int, block_size: int, split: bool, dtype: str,
                 kv_quant: int) -> LoweringCase:
    return LoweringCase(
        name=(f"paged_attention[h={heads}/{kv_heads},d={head_size},bs={block_size},split={split},{dtype}"
              f"{KV_NAMES[kv_quant]}]"),
        kernel=paged_decode_kernel,
        arg_types=signature_types(paged_decode_kernel, dtype, table_ptr="*i32", lens_ptr="*i32", cu_q_ptr="*i32",
                                  acc_ws="*fp32", m_ws="*fp32", l_ws="*fp32", scale="fp32", softcap="fp32",
                                  **cache_types(kv_quant != KV_FLOAT)),
        constexprs={**tiling(heads, kv_heads, head_size, block_size, kv_quant != KV_FLOAT), "SPLIT": split,
                    "USE_SOFTCAP": split, "USE_WINDOW": not split, "UPCAST_DOT": False,
                    "VARLEN_Q": block_size == 64, "MIN_SPLIT": 256, "KV_QUANT": kv_quant},
        expect_mode="mix",
    )


def cases() -> list[LoweringCase]:
    cases = []
    for heads, kv_heads, head_size, block_size in paged_layouts(LARGEST):
        dtype = DTYPES[BLOCK_SIZES.index(block_size) % len(DTYPES)]
        cases.append(_decode_case(heads, kv_heads, head_size, block_size, block_size == 128, dtype, KV_FLOAT))
    # int8: split and unsplit, fp16 and bf16 alternate over the layouts
    for i, layout in enumerate(int8_layouts(LARGEST)):
        cases.append(_decode_case(*layout, i % 2 == 0, DTYPES[i // 2 % len(DTYPES)], KV_INT8_DYNAMIC))
    for i, layout in enumerate(LARGEST):
        cases.append(_decode_case(*layout, i % 2 == 1, DTYPES[i % len(DTYPES)], KV_INT8_STATIC))
    for i, head_size in enumerate(ATTENTION_HEAD_SIZES):
        dtype = DTYPES[i % len(DTYPES)]
        cases.append(LoweringCase(
            name=f"paged_attention_reduce[d={head_size},{dtype}]",
            kernel=paged_reduce_kernel,
            arg_types=signature_types(paged_reduce_kernel, dtype, acc_ws="*fp32", m_ws="*fp32", l_ws="*fp32",
                                      cu_q_ptr="*i32"),
            constexprs={"HEADS": 32, "D": head_size, "D_PAD": triton.next_power_of_2(head_size), "S_PAD": MAX_SPLITS,
                        "VARLEN_Q": i % 2 == 1},
        ))
    return cases
