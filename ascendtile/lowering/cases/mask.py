"""causal_mask: decode-length and long-context key lengths, every mask dtype (fp32 too, for
CPU-style callers) and both index dtypes."""
from __future__ import annotations

from ascendtile.kernels.mask import block_for, causal_mask_kernel
from ascendtile.lowering.case import LoweringCase, signature_types


def cases() -> list[LoweringCase]:
    return [
        LoweringCase(
            name=f"causal_mask[max_kv={max_kv},{dtype},{index}]",
            kernel=causal_mask_kernel,
            arg_types=signature_types(causal_mask_kernel, dtype, q_lens_ptr=f"*{index}", kv_lens_ptr=f"*{index}",
                                      fill_value="fp32"),
            constexprs={"BLOCK": block_for(max_kv)},
        )
        for dtype in ("fp16", "bf16", "fp32")
        for max_kv in (128, 4096)
        for index in ("i32", "i64")
    ]
