"""Stage 1 of the Ascend compiler on this CPU: triton-ascend's own front end builds a kernel's
TTIR and its bundled `triton-adapter-opt` lowers it to Linalg for an Ascend 910B target; then
the lowered text is read for the core mode, discrete (gather/scatter) accesses and masked stores
that became read-modify-write. On-chip memory is not estimated here: stage 2 (hivm.py) reports
what the compiler's planner allocates."""
from __future__ import annotations

import dataclasses
import re
from typing import Any

from ascendtile.lowering.case import LoweringCase, signature

TARGET_ARCH = "Ascend910B4"


def backend():
    """triton-ascend's backend for the target; its default options are what both stages follow."""
    from triton.backends.ascend.compiler import AscendBackend
    from triton.backends.compiler import GPUTarget

    return AscendBackend(GPUTarget("npu", TARGET_ARCH, 0))


def lower_to_linalg(case: LoweringCase) -> str:
    """The case's Linalg IR text (the kernel must be a JITFunction, not interpreted); raises
    whatever the front end or triton-adapter-opt raises."""
    from triton._C.libtriton import ir
    from triton.backends.ascend.compiler import make_ttir, ttir_to_linalg
    from triton.compiler.compiler import ASTSource

    ascend = backend()
    options = ascend.parse_options({})
    context = ir.context()
    ir.load_dialects(context)
    ascend.load_dialects(context)
    source = ASTSource(case.kernel, signature(case), dict(case.constexprs))
    module = source.make_ir(options, ascend.get_codegen_implementation(), ascend.get_module_map(), context)
    # as triton's compile() builds it: the options' fields (A2 computes enable_select_analysis
    # False, for example) plus the kernel hash
    metadata = {**dataclasses.asdict(options), "hash": source.hash()}
    module = make_ttir(module, metadata, options)
    return ttir_to_linalg(module, metadata, options, named_ops=True)


# A load or store the front end could not make a block copy becomes a scalar loop it tags.
_ELEMENT_LOOP = re.compile(r"scf\.for\b((?:(?!scf\.for\b).)*?)\}\s*\{ExtractedLoadOrStore\}", re.S)
_COPY = re.compile(r"memref\.copy (%[\w.]+), (%[\w.]+)")
_TO_TENSOR = re.compile(r"(%[\w.]+) = bufferization\.to_tensor (%[\w.]+)")
_SELECT = re.compile(r"(%[\w.]+) = arith\.select %[\w.]+, (%[\w.]+), (%[\w.]+)")
_STORE = re.compile(r"materialize_in_destination (%[\w.]+) in writable (%[\w.]+)")


def _rmw_stores(ir_text: str) -> int:
    """Stores of `select(mask, new, old)` where `old` was read from the store's own destination."""
    copied_from = {dst: src for src, dst in _COPY.findall(ir_text)}
    read_from = {tensor: copied_from.get(buffer) for tensor, buffer in _TO_TENSOR.findall(ir_text)}
    selects = {value: (a, b) for value, a, b in _SELECT.findall(ir_text)}
    return sum(any(read_from.get(operand) == dest for operand in selects.get(value, ()))
               for value, dest in _STORE.findall(ir_text))


def inspect_lowered(ir_text: str) -> dict[str, Any]:
    """Core mode, discrete accesses and store hazards from the lowered (Linalg) IR text."""
    mode = re.search(r'mix_mode\s*=\s*"(\w+)"', ir_text)
    loops = _ELEMENT_LOOP.findall(ir_text)
    return {
        "mix_mode": mode.group(1) if mode else "unknown",
        "discrete_sites": len(re.findall(r"tensor\.extract[^\n]*\{DiscreteMemAccess\}", ir_text)),
        # An element gather rebuilds its result one scalar per iteration: the loop yields it.
        "element_gathers": len(re.findall(r"scf\.yield \{DiscreteMemAccess\}", ir_text)),
        # An element scatter writes one scalar per iteration of such a loop.
        "element_scatters": sum("materialize_in_destination" in body for body in loops),
        # A store whose mask is no rectangle becomes read old tile, select, write the whole tile:
        # an extra read and a non-atomic read-modify-write of memory other programs may own.
        "rmw_stores": _rmw_stores(ir_text),
    }
