"""scaled_mm (int8 a, both b layouts) and w8a8_linear (float a quantized on chip, static and
dynamic) at the tile sizes the launcher picks for 16-64 token rows."""
from __future__ import annotations

from ascendkit.kernels.scaled_mm import A_DYNAMIC, A_INT8, A_STATIC, scaled_mm_kernel, tiles_for
from ascendkit.lowering.case import LoweringCase, signature_types
from ascendkit.lowering.shape_grid import DTYPES


def cases() -> list[LoweringCase]:
    cases = []
    for dtype in DTYPES:
        for m in (16, 32, 64):
            variants = [("scaled_mm", A_INT8, "*i8", True), ("scaled_mm_rowmajor_b", A_INT8, "*i8", False),
                        ("w8a8_linear_static", A_STATIC, f"*{dtype}", True), ("w8a8_linear_dynamic", A_DYNAMIC, f"*{dtype}", True)]
            for name, a_mode, a_type, k_contiguous in variants:
                block_m, block_n, block_k = tiles_for(m, a_mode)
                cases.append(LoweringCase(
                    name=f"{name}[{block_m}x{block_n}x{block_k},{dtype}]",
                    kernel=scaled_mm_kernel,
                    arg_types=signature_types(scaled_mm_kernel, dtype, a_ptr=a_type, b_ptr="*i8", a_scale_ptr="*fp32",
                                              b_scale_ptr="*fp32", M="i32", N="i32", K="i32"),
                    constexprs={"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k, "A_MODE": a_mode,
                                "A_PER_ROW": True, "B_PER_COL": True, "HAS_BIAS": True, "B_K_CONTIGUOUS": k_contiguous},
                    expect_mode="mix",
                ))
    return cases
