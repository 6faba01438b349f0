"""silu_and_mul / gelu_tanh_and_mul / gelu_and_mul: every MLP intermediate size."""
from __future__ import annotations

from ascendtile.kernels.activation import ACTIVATIONS, block_for, gated_activation_kernel
from ascendtile.lowering.case import LoweringCase, signature_types
from ascendtile.lowering.shape_grid import DTYPES, INTERMEDIATE_SIZES


def cases() -> list[LoweringCase]:
    return [
        LoweringCase(
            name=f"{activation}_and_mul[d={d},{dtype}]",
            kernel=gated_activation_kernel,
            arg_types=signature_types(gated_activation_kernel, dtype),
            constexprs={"D": d, "BLOCK": block_for(d), "ACTIVATION": activation, "QUANT": False},
        )
        for activation in ACTIVATIONS
        for dtype in DTYPES
        for d in INTERMEDIATE_SIZES
    ]
