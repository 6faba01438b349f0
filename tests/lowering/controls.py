"""Positive controls for the Ascend gate: small kernels with one known hazard each. The gate must
fail every one of them for its reason, so none of its checks can pass vacuously."""
import triton
import triton.language as tl

from ascendtile.lowering.case import LoweringCase, signature_types


@triton.jit
def element_gather_kernel(x_ptr, idx_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + tl.load(idx_ptr + offs)))


@triton.jit
def element_scatter_kernel(x_ptr, idx_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + tl.load(idx_ptr + offs), tl.load(x_ptr + offs))


@triton.jit
def triangle_store_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    rows = tl.arange(0, BLOCK)[:, None]
    cols = tl.arange(0, BLOCK)[None, :]
    tl.store(out_ptr + rows * BLOCK + cols, tl.load(x_ptr + rows * BLOCK + cols), mask=cols <= rows)


@triton.jit
def oversized_tile_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs).to(tl.float32)
    tl.store(out_ptr + offs, (x * x + 1.0).to(out_ptr.dtype.element_ty))


# case name -> the hazard text the gate must report for it
EXPECTED = {
    "element_gather": "element-granular gather",
    "element_scatter": "element-granular scatter",
    "triangle_store": "read-modify-write",
    "oversized_tile": "ub overflow",
}


def cases() -> list[LoweringCase]:
    return [
        LoweringCase("element_gather", element_gather_kernel,
                     signature_types(element_gather_kernel, "fp16", idx_ptr="*i32"), {"BLOCK": 256}),
        LoweringCase("element_scatter", element_scatter_kernel,
                     signature_types(element_scatter_kernel, "fp16", idx_ptr="*i32"), {"BLOCK": 256}),
        LoweringCase("triangle_store", triangle_store_kernel, signature_types(triangle_store_kernel, "fp16"),
                     {"BLOCK": 64}),
        # 64k fp16 elements with an fp32 copy: 384 KB of UB planned, twice what a core has
        LoweringCase("oversized_tile", oversized_tile_kernel, signature_types(oversized_tile_kernel, "fp16"),
                     {"BLOCK": 65536}),
    ]
