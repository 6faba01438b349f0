"""mla_attention (direct and split-KV) over the MLA latent layouts at every block size, and the
split merge kernel."""
from __future__ import annotations

import triton

from ascendtile.kernels.mla import block_h_for, block_n_for, merge_block_d, mla_attention_kernel, mla_merge_kernel
from ascendtile.lowering.case import LoweringCase, signature_types
from ascendtile.lowering.shape_grid import BLOCK_SIZES, DTYPES, MLA_LAYOUTS


def cases() -> list[LoweringCase]:
    cases = []
    for dtype in DTYPES:
        for lora, rope, heads in MLA_LAYOUTS:
            block_h, block_l = block_h_for(lora, heads), triton.next_power_of_2(lora)
            for block_size in BLOCK_SIZES:
                for split in (False, True):
                    cases.append(LoweringCase(
                        name=f"mla_attention[L={lora},R={rope},bs={block_size},{'split' if split else 'direct'},{dtype}]",
                        kernel=mla_attention_kernel,
                        arg_types=signature_types(mla_attention_kernel, dtype, bt_ptr="*i32", seq_ids_ptr="*i32",
                                                  cu_ptr="*i32", seqused_ptr="*i32", part_ptr="*fp32",
                                                  lse_ptr="*fp32", qk_scale_log2="fp32"),
                        constexprs={"L": lora, "R": rope, "BLOCK_L": block_l, "BLOCK_R": triton.next_power_of_2(rope),
                                    "BLOCK_SIZE": block_size, "BLOCK_H": block_h,
                                    "BLOCK_N": block_n_for(lora, block_size), "SPLIT": split,
                                    "UPCAST_DOT": False},
                        expect_mode="mix",
                    ))
            cases.append(LoweringCase(
                name=f"mla_merge[L={lora},{dtype}]",
                kernel=mla_merge_kernel,
                arg_types=signature_types(mla_merge_kernel, dtype, part_ptr="*fp32", lse_ptr="*fp32"),
                constexprs={"L": lora, "BLOCK_L": block_l, "BLOCK_H": block_h, "BLOCK_D": merge_block_d(block_l, block_h)},
            ))
    return cases
