"""Stage 1 of the Ascend compiler on this CPU: triton-ascend's own front end builds a kernel's
TTIR and its bundled `triton-adapter-opt` lowers it to Linalg for an Ascend 910B target; then
the lowered text is read for the core mode, discrete (gather) accesses and buffer sizes."""
from __future__ import annotations

import re
from typing import Any

from ascendkit.lowering.case import LoweringCase

TARGET_ARCH = "Ascend910B4"

_ELEMENT_BYTES = {"f16": 2, "bf16": 2, "f32": 4, "i32": 4, "i64": 8, "i16": 2, "i8": 1, "i1": 1, "index": 8}


def lower_to_linalg(case: LoweringCase) -> str:
    """The case's Linalg IR text (the kernel must be a JITFunction, not interpreted); raises
    whatever the front end or triton-adapter-opt raises."""
    from triton._C.libtriton import ir
    from triton.backends.ascend.compiler import AscendBackend, make_ttir, ttir_to_linalg
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import ASTSource

    signature = {}
    for arg in case.kernel.arg_names:
        if arg in case.constexprs:
            signature[arg] = "constexpr"
        elif arg in case.arg_types:
            signature[arg] = case.arg_types[arg]
        else:
            raise ValueError(f"{case.name}: no type or constexpr value for kernel argument {arg!r}")
    backend = AscendBackend(GPUTarget("npu", TARGET_ARCH, 0))
    options = backend.parse_options({})
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    source = ASTSource(case.kernel, signature, dict(case.constexprs))
    module = source.make_ir(options, backend.get_codegen_implementation(), backend.get_module_map(), context)
    metadata = {
        "hash": source.hash(),
        "enable_nd2nz_on_vector": False,
        "enable_select_analysis": True,
        "compile_on_910_95": False,
        "force_simt_template": False,
    }
    module = make_ttir(module, metadata, options)
    return ttir_to_linalg(module, metadata, options, named_ops=True)


def _tensor_bytes(shape_and_type: str) -> int:
    *dims, elem = shape_and_type.split("x")
    if any(d == "?" for d in dims) or elem not in _ELEMENT_BYTES:
        return 0
    size = _ELEMENT_BYTES[elem]
    for d in dims:
        size *= int(d)
    return size


def inspect_lowered(ir_text: str) -> dict[str, Any]:
    """Mode, discrete access and buffer estimate from the lowered (linalg/hivm) IR text."""
    mode = re.search(r'mix_mode\s*=\s*"(\w+)"', ir_text)
    allocs = re.findall(r"memref\.alloc\(\)[^:]*:\s*memref<([^,>]+)", ir_text)
    empties = re.findall(r"tensor\.empty\(\)\s*:\s*tensor<([^,>]+)>", ir_text)
    return {
        "mix_mode": mode.group(1) if mode else "unknown",
        "discrete_sites": len(re.findall(r"tensor\.extract[^\n]*\{DiscreteMemAccess\}", ir_text)),
        # An element gather rebuilds its result one scalar per iteration: the loop yields it.
        "element_gathers": len(re.findall(r"scf\.yield \{DiscreteMemAccess\}", ir_text)),
        "alloc_bytes": sum(_tensor_bytes(s) for s in allocs),
        "intermediate_bytes": sum(_tensor_bytes(s) for s in empties),
    }
