"""rms_norm + int8 quant (dynamic / static, with and without the residual add) at every hidden
size; silu_and_mul_quant (the gated activation kernel with its int8 output) at every MLP width."""
from __future__ import annotations

from ascendtile.kernels.activation import block_for as gated_block_for
from ascendtile.kernels.activation import gated_activation_kernel
from ascendtile.kernels.fused_quant import block_for, rms_norm_quant_kernel
from ascendtile.lowering.case import LoweringCase, signature_types
from ascendtile.lowering.shape_grid import DTYPES, HIDDEN_SIZES, INTERMEDIATE_SIZES

# (op name, DYNAMIC, HAS_RESIDUAL)
NORM_OPS = (
    ("rms_norm_dynamic_per_token_quant", True, False),
    ("rms_norm_dynamic_per_token_quant+residual", True, True),
    ("rms_norm_static_int8_quant", False, False),
    ("fused_add_rms_norm_static_int8_quant", False, True),
)


def cases() -> list[LoweringCase]:
    norm = [
        LoweringCase(
            name=f"{op}[h={hidden},{dtype}]",
            kernel=rms_norm_quant_kernel,
            arg_types=signature_types(rms_norm_quant_kernel, dtype, out_ptr="*i8", scale_ptr="*fp32", eps="fp32"),
            constexprs={"N": hidden, "BLOCK": block_for(hidden, dynamic), "HAS_RESIDUAL": residual, "DYNAMIC": dynamic},
        )
        for dtype in DTYPES
        for hidden in HIDDEN_SIZES
        for op, dynamic, residual in NORM_OPS
    ]
    silu = [
        LoweringCase(
            name=f"silu_and_mul_quant[d={d},{dtype}]",
            kernel=gated_activation_kernel,
            arg_types=signature_types(gated_activation_kernel, dtype, out_ptr="*i8", scale_ptr="*fp32"),
            constexprs={"D": d, "BLOCK": gated_block_for(d, quant=True), "ACTIVATION": "silu", "QUANT": True},
        )
        for dtype in DTYPES
        for d in INTERMEDIATE_SIZES
    ]
    return norm + silu
