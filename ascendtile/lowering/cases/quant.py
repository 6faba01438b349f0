"""static / dynamic int8 quantization (with and without azp) at every hidden size; MLP
down-projection inputs (the intermediate sizes) are quantized dynamically."""
from __future__ import annotations

from ascendtile.kernels.quant import block_for, int8_quant_kernel
from ascendtile.lowering.case import LoweringCase, signature_types
from ascendtile.lowering.shape_grid import DTYPES, HIDDEN_SIZES, INTERMEDIATE_SIZES


def cases() -> list[LoweringCase]:
    modes = ((False, False), (False, True), (True, False), (True, True))
    shapes = [(h, m) for h in HIDDEN_SIZES for m in modes] + [(i, (True, False)) for i in INTERMEDIATE_SIZES]
    cases = []
    for dtype in DTYPES:
        for hidden, (dynamic, has_azp) in shapes:
            kind = f"{'dynamic' if dynamic else 'static'}{'_azp' if has_azp else ''}"
            cases.append(LoweringCase(
                name=f"int8_quant_{kind}[h={hidden},{dtype}]",
                kernel=int8_quant_kernel,
                arg_types=signature_types(int8_quant_kernel, dtype, out_ptr="*i8", scale_ptr="*fp32", azp_ptr="*i32"),
                constexprs={"N": hidden, "BLOCK": block_for(hidden), "DYNAMIC": dynamic, "HAS_AZP": has_azp},
            ))
    return cases
