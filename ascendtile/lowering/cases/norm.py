"""rms_norm / fused_add_rms_norm: every hidden size, with and without the residual, at one row
per tile (decode batches) and at the most rows per tile the launcher picks for that width. The
no-weight variant (vLLM's weight=None) only drops the weight's load and multiply, so it is lowered
for one dtype at the narrowest width (multi-row tiles) and the widest (chunked rows)."""
from __future__ import annotations

from ascendtile.kernels.norm import block_for, max_rows_for, rms_norm_kernel
from ascendtile.lowering.case import LoweringCase, signature_types
from ascendtile.lowering.shape_grid import DTYPES, HIDDEN_SIZES

NO_WEIGHT_DTYPE = DTYPES[-1]
NO_WEIGHT_HIDDEN = (min(HIDDEN_SIZES), max(HIDDEN_SIZES))


def _case(dtype: str, hidden: int, has_residual: bool, rows: int, has_weight: bool) -> LoweringCase:
    op = "fused_add_rms_norm" if has_residual else "rms_norm"
    return LoweringCase(
        name=f"{op}[h={hidden},rows={rows},{dtype}{'' if has_weight else ',no_weight'}]",
        kernel=rms_norm_kernel,
        arg_types=signature_types(rms_norm_kernel, dtype, eps="fp32"),
        constexprs={"N": hidden, "BLOCK": block_for(hidden, has_residual), "ROWS": rows,
                    "HAS_RESIDUAL": has_residual, "HAS_WEIGHT": has_weight},
    )


def cases() -> list[LoweringCase]:
    return [
        _case(dtype, hidden, has_residual, rows, has_weight)
        for has_weight, dtypes, hiddens in ((True, DTYPES, HIDDEN_SIZES), (False, (NO_WEIGHT_DTYPE,), NO_WEIGHT_HIDDEN))
        for dtype in dtypes
        for hidden in hiddens
        for has_residual in (False, True)
        for rows in sorted({1, max_rows_for(hidden, has_residual)})
    ]
