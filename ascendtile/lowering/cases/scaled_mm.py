"""scaled_mm (int8 a, both b layouts) at every tile shape the launcher can pick. w8a8_linear runs
the int8 quant kernel (cases/quant.py) and then this GEMM."""
from __future__ import annotations

from ascendtile.kernels.scaled_mm import scaled_mm_kernel, tile_shapes
from ascendtile.lowering.case import LoweringCase, signature_types
from ascendtile.lowering.shape_grid import DTYPES


def cases() -> list[LoweringCase]:
    cases = []
    for dtype in DTYPES:
        for name, k_contiguous in (("scaled_mm", True), ("scaled_mm_rowmajor_b", False)):
            for block_m, block_n, block_k in tile_shapes(k_contiguous):
                cases.append(LoweringCase(
                    name=f"{name}[{block_m}x{block_n}x{block_k},{dtype}]",
                    kernel=scaled_mm_kernel,
                    arg_types=signature_types(scaled_mm_kernel, dtype, a_ptr="*i8", b_ptr="*i8", a_scale_ptr="*fp32",
                                              b_scale_ptr="*fp32", M="i32", N="i32", K="i32"),
                    constexprs={"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k, "A_PER_ROW": True,
                                "B_PER_COL": True, "HAS_BIAS": True, "B_K_CONTIGUOUS": k_contiguous},
                    expect_mode="mix",
                ))
    return cases
