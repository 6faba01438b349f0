"""SiLU-and-multiply (the gated MLP activation): a vector kernel persistent over rows,
chunked over the output width."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ascendkit.kernels.ascend_gate import LoweringCase, lowering_cases
from ascendkit.kernels.shape_grid import DTYPES, INTERMEDIATE_SIZES
from ascendkit.platform import grid_size

# Gate + up inputs, their fp32 copies and the product: ~20 bytes per element -> 2048 is ~40 KB.
MAX_BLOCK = 2048


@triton.jit(do_not_specialize=["n_rows", "x_stride", "out_stride"])
def silu_and_mul_kernel(x_ptr, out_ptr, n_rows, x_stride, out_stride, D: tl.constexpr, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    for row in range(tl.program_id(0), n_rows, tl.num_programs(0)):
        x_row = x_ptr + tl.cast(row, tl.int64) * x_stride
        out_row = out_ptr + tl.cast(row, tl.int64) * out_stride
        for start in range(0, D, BLOCK):
            mask = cols < D - start
            gate = tl.load(x_row + start + cols, mask=mask, other=0.0).to(tl.float32)
            up = tl.load(x_row + D + start + cols, mask=mask, other=0.0).to(tl.float32)
            y = gate * tl.sigmoid(gate) * up
            tl.store(out_row + start + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def block_for(width: int) -> int:
    return min(triton.next_power_of_2(width), MAX_BLOCK)


def silu_and_mul(out: torch.Tensor, input: torch.Tensor) -> None:
    d = out.shape[-1]
    x2, out2 = input.view(-1, 2 * d), out.view(-1, d)
    rows = x2.shape[0]
    if rows == 0:
        return
    silu_and_mul_kernel[(grid_size(input.device, rows),)](
        x2, out2, rows, x2.stride(0), out2.stride(0), D=d, BLOCK=block_for(d)
    )


@lowering_cases("activation")
def _cases() -> list[LoweringCase]:
    return [
        LoweringCase(
            name=f"silu_and_mul[d={d},{dtype}]",
            kernel=silu_and_mul_kernel,
            arg_types={"x_ptr": f"*{dtype}", "out_ptr": f"*{dtype}", "n_rows": "i32", "x_stride": "i32", "out_stride": "i32"},
            constexprs={"D": d, "BLOCK": block_for(d)},
        )
        for dtype in DTYPES
        for d in INTERMEDIATE_SIZES
    ]
