"""paged_attention: the decode kernel over every layout (dtype, split-KV, softcap / window and
the varlen-query variant alternate across the grid) and the split reduce kernel."""
from __future__ import annotations

import triton

from ascendtile.kernels.attention_paged import MAX_SPLITS, paged_decode_kernel, paged_reduce_kernel, tiling
from ascendtile.lowering.case import LoweringCase, signature_types
from ascendtile.lowering.cases._attention import paged_layouts
from ascendtile.lowering.shape_grid import ATTENTION_HEAD_SIZES, BLOCK_SIZES, DTYPES


def cases() -> list[LoweringCase]:
    cases = []
    # the largest groups the decode kernel admits: MQA 64 / 1 at 128 dims, 16 / 1 at 256
    for heads, kv_heads, head_size, block_size in paged_layouts([(64, 1, 128, 128), (16, 1, 256, 64)]):
        dtype = DTYPES[BLOCK_SIZES.index(block_size) % len(DTYPES)]
        split = block_size == 128
        cases.append(LoweringCase(
            name=f"paged_attention[h={heads}/{kv_heads},d={head_size},bs={block_size},split={split},{dtype}]",
            kernel=paged_decode_kernel,
            arg_types=signature_types(paged_decode_kernel, dtype, table_ptr="*i32", lens_ptr="*i32", cu_q_ptr="*i32",
                                      acc_ws="*fp32", m_ws="*fp32", l_ws="*fp32", scale="fp32", softcap="fp32"),
            constexprs={**tiling(heads, kv_heads, head_size, block_size), "SPLIT": split,
                        "USE_SOFTCAP": split, "USE_WINDOW": not split, "UPCAST_DOT": False,
                        "VARLEN_Q": block_size == 64, "MIN_SPLIT": 256},
            expect_mode="mix",
        ))
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
