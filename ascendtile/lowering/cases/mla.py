"""mla_attention (direct and split-KV) over the MLA latent layouts at every block size, over a
float cache; over an int8 cache with dynamic per-token scales at the smallest and the NPU's block
size, with the static scale split-KV at the NPU's block size in bf16; and the split merge kernel."""
from __future__ import annotations

import triton

from ascendtile.kernels._attention import KV_FLOAT, KV_INT8_DYNAMIC, KV_INT8_STATIC
from ascendtile.kernels.mla import block_h_for, block_n_for, merge_block_d, mla_attention_kernel, mla_merge_kernel
from ascendtile.lowering.case import LoweringCase, signature_types
from ascendtile.lowering.shape_grid import BLOCK_SIZES, DTYPES, MLA_LAYOUTS

KV_NAMES = {KV_FLOAT: "", KV_INT8_STATIC: ",int8-static", KV_INT8_DYNAMIC: ",int8-dynamic"}


def _variants(block_size: int, dtype: str) -> list[tuple[int, bool]]:
    """(KV_QUANT, split) pairs lowered at this block size and dtype."""
    variants = [(KV_FLOAT, False), (KV_FLOAT, True)]
    if block_size in (16, 128):
        variants += [(KV_INT8_DYNAMIC, False), (KV_INT8_DYNAMIC, True)]
    if block_size == 128 and dtype == "bf16":
        variants.append((KV_INT8_STATIC, True))
    return variants


def cases() -> list[LoweringCase]:
    cases = []
    for dtype in DTYPES:
        for lora, rope, heads in MLA_LAYOUTS:
            block_h, block_l = block_h_for(lora, heads), triton.next_power_of_2(lora)
            for block_size in BLOCK_SIZES:
                for kv_quant, split in _variants(block_size, dtype):
                    int8 = kv_quant != KV_FLOAT
                    cases.append(LoweringCase(
                        name=(f"mla_attention[L={lora},R={rope},bs={block_size},"
                              f"{'split' if split else 'direct'},{dtype}{KV_NAMES[kv_quant]}]"),
                        kernel=mla_attention_kernel,
                        arg_types=signature_types(
                            mla_attention_kernel, dtype, bt_ptr="*i32", seq_ids_ptr="*i32", cu_ptr="*i32",
                            seqused_ptr="*i32", part_ptr="*fp32", lse_ptr="*fp32", qk_scale_log2="fp32",
                            **(dict(kv_ptr="*i8", kv_scale_ptr="*fp32") if int8 else {})),
                        constexprs={"L": lora, "R": rope, "BLOCK_L": block_l,
                                    "BLOCK_R": triton.next_power_of_2(rope), "BLOCK_SIZE": block_size,
                                    "BLOCK_H": block_h, "BLOCK_N": block_n_for(lora, block_size, int8), "SPLIT": split,
                                    "UPCAST_DOT": False, "KV_QUANT": kv_quant},
                        expect_mode="mix",
                    ))
            cases.append(LoweringCase(
                name=f"mla_merge[L={lora},{dtype}]",
                kernel=mla_merge_kernel,
                arg_types=signature_types(mla_merge_kernel, dtype, part_ptr="*fp32", lse_ptr="*fp32"),
                constexprs={"L": lora, "BLOCK_L": block_l, "BLOCK_H": block_h, "BLOCK_D": merge_block_d(block_l, block_h)},
            ))
    return cases
