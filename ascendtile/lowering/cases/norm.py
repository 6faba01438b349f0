"""rms_norm / fused_add_rms_norm: every hidden size, with and without the residual, at one row
per tile (decode batches) and at the most rows per tile the launcher picks for that width."""
from __future__ import annotations

from ascendtile.kernels.norm import block_for, max_rows_for, rms_norm_kernel
from ascendtile.lowering.case import LoweringCase, signature_types
from ascendtile.lowering.shape_grid import DTYPES, HIDDEN_SIZES


def cases() -> list[LoweringCase]:
    return [
        LoweringCase(
            name=f"{'fused_add_rms_norm' if has_residual else 'rms_norm'}[h={hidden},rows={rows},{dtype}]",
            kernel=rms_norm_kernel,
            arg_types=signature_types(rms_norm_kernel, dtype, eps="fp32"),
            constexprs={"N": hidden, "BLOCK": block_for(hidden, has_residual), "ROWS": rows, "HAS_RESIDUAL": has_residual},
        )
        for dtype in DTYPES
        for hidden in HIDDEN_SIZES
        for has_residual in (False, True)
        for rows in sorted({1, max_rows_for(hidden, has_residual)})
    ]
