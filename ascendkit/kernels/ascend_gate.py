"""Ascend lowering gate: compile kernels with triton-ascend's own front end and lower them with its
`triton-adapter-opt` for an Ascend 910B target, on a CPU, and inspect the result for hazards.

Each kernel module registers the cases (real model shapes) it must lower for with
`@lowering_cases("family")`. A case passes when it lowers, runs in the expected core mode
("aiv" vector-only, or "mix" cube + vector for `tl.dot`), has no element-granular gather, and its
on-chip buffer estimate stays under the per-iteration UB budget.

Kernels decorated under TRITON_INTERPRET=1 are interpreter objects the code generator cannot
lower, so `run_gate` runs the lowering in a fresh subprocess whenever the interpreter is on.
"""
from __future__ import annotations

import dataclasses
import importlib
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

# Unified buffer is 192 KB per core; double buffering halves what one loop iteration may hold.
UB_BUDGET_BYTES = 96 * 1024
TARGET_ARCH = "Ascend910B4"

_ELEMENT_BYTES = {"f16": 2, "bf16": 2, "f32": 4, "i32": 4, "i64": 8, "i16": 2, "i8": 1, "i1": 1, "index": 8}


@dataclass(frozen=True)
class LoweringCase:
    name: str
    kernel: Any  # a @triton.jit function
    arg_types: dict[str, str]  # every non-constexpr argument -> "*fp16", "*i32", "i32", "fp32", ...
    constexprs: dict[str, Any] = field(default_factory=dict)
    expect_mode: str = "aiv"  # "aiv" (vector cores) or "mix" (tl.dot on the cube core)


@dataclass
class LoweringReport:
    name: str
    ok: bool
    mix_mode: str = ""
    expect_mode: str = ""
    discrete_sites: int = 0  # DiscreteMemAccess annotations (row- or element-granular)
    element_gathers: int = 0  # discrete accesses that move one element per iteration
    alloc_bytes: int = 0  # static memref.alloc buffers
    intermediate_bytes: int = 0  # tensor.empty intermediates
    error: str = ""

    @property
    def buffer_bytes(self) -> int:
        return self.alloc_bytes + self.intermediate_bytes

    @property
    def hazards(self) -> list[str]:
        found = []
        if not self.ok:
            found.append(f"lowering failed: {self.error}")
            return found
        if self.mix_mode != self.expect_mode:
            found.append(f"mode {self.mix_mode}, expected {self.expect_mode}")
        if self.element_gathers:
            found.append(f"{self.element_gathers} element-granular gather(s)")
        if self.buffer_bytes > UB_BUDGET_BYTES:
            found.append(f"on-chip estimate {self.buffer_bytes / 1024:.1f} KB > {UB_BUDGET_BYTES // 1024} KB")
        return found

    @property
    def passed(self) -> bool:
        return not self.hazards


def signature_types(kernel: Any, dtype: str, constexprs: dict[str, Any] | None = None, **overrides: str) -> dict[str, str]:
    """A case's `arg_types` derived from the kernel's argument names: `*_ptr` arguments point to
    `dtype`, every other runtime argument is i32, except the `overrides` (e.g. table_ptr="*i32",
    scale="fp32"). Constexpr arguments (upper case, or named in `constexprs`) are skipped."""
    unknown = set(overrides) - set(kernel.arg_names)
    if unknown:
        raise ValueError(f"overrides: {sorted(unknown)} are not arguments of {kernel.__name__}")
    constexprs = constexprs or {}
    types = {}
    for arg in kernel.arg_names:
        if arg in constexprs or arg.isupper():
            continue
        types[arg] = overrides.get(arg, f"*{dtype}" if arg.endswith("_ptr") else "i32")
    return types


# family -> function returning that family's cases; filled by @lowering_cases in kernel modules.
_PRODUCERS: dict[str, Callable[[], list[LoweringCase]]] = {}


def lowering_cases(family: str) -> Callable:
    """Register a kernel module's case producer; `family` is the module's name (norm, rope, ...).
    Shared @triton.jit helpers live in modules whose names start with '_' and register nothing."""
    def register(producer: Callable[[], list[LoweringCase]]) -> Callable[[], list[LoweringCase]]:
        _PRODUCERS[family] = producer
        return producer

    return register


def all_cases(families: list[str] | None = None) -> list[LoweringCase]:
    from ascendkit.kernels import KERNEL_MODULES

    for module in KERNEL_MODULES:
        importlib.import_module(f"ascendkit.kernels.{module}")
    silent = set(KERNEL_MODULES) - set(_PRODUCERS)
    if silent:
        raise RuntimeError(f"kernel modules {sorted(silent)} register no @lowering_cases(<module name>)")
    unknown = set(families or ()) - set(_PRODUCERS)
    if unknown:
        raise ValueError(f"families: unknown kernel families {sorted(unknown)}; known: {sorted(_PRODUCERS)}")
    return [case for fam, producer in _PRODUCERS.items() if not families or fam in families for case in producer()]


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


def lower(case: LoweringCase) -> LoweringReport:
    """Lower one case in this process (the kernel must be a JITFunction, not interpreted)."""
    from triton._C.libtriton import ir
    from triton.backends.ascend.compiler import AscendBackend, make_ttir, ttir_to_linalg
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import ASTSource

    report = LoweringReport(case.name, ok=False, expect_mode=case.expect_mode)
    try:
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
        lowered = ttir_to_linalg(module, metadata, options, named_ops=True)
    except subprocess.CalledProcessError as exc:
        report.error = (exc.stderr or b"").decode(errors="replace").strip().splitlines()[-1:] or [str(exc)]
        report.error = report.error[0]
        return report
    except Exception as exc:  # compile errors from the front end surface as many types
        report.error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}"
        return report
    report.ok = True
    for key, value in inspect_lowered(lowered).items():
        setattr(report, key, value)
    return report


def run_gate(families: list[str] | None = None) -> list[LoweringReport]:
    """Lower every registered case; in a clean subprocess if the interpreter is on here."""
    if os.environ.get("TRITON_INTERPRET", "0") != "1":
        return [lower(case) for case in all_cases(families)]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    cmd = [sys.executable, "-m", "ascendkit.kernels.ascend_gate", "--json"]
    for fam in families or ():
        cmd += ["--family", fam]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"lowering gate subprocess failed:\n{done.stderr[-4000:]}")
    return [LoweringReport(**row) for row in json.loads(done.stdout)]


def format_table(reports: list[LoweringReport]) -> str:
    header = f"{'kernel case':<58} {'mode':<5} {'disc':>4} {'elem':>4} {'UB KB':>7}  result"
    lines = [header, "-" * len(header)]
    for r in reports:
        verdict = "ok" if r.passed else "FAIL: " + "; ".join(r.hazards)
        lines.append(f"{r.name:<58} {r.mix_mode:<5} {r.discrete_sites:>4} {r.element_gathers:>4} {r.buffer_bytes / 1024:>7.1f}  {verdict}")
    failed = sum(not r.passed for r in reports)
    lines.append(f"{len(reports) - failed} passed, {failed} failed (target {TARGET_ARCH}, UB budget {UB_BUDGET_BYTES // 1024} KB)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="Lower ascendkit kernels for Ascend on this CPU.")
    parser.add_argument("--json", action="store_true", help="print reports as JSON")
    parser.add_argument("--family", action="append", help="only this kernel family (repeatable)")
    args = parser.parse_args(argv)
    reports = run_gate(args.family)
    if args.json:
        print(json.dumps([dataclasses.asdict(r) for r in reports]))
        return 0
    print(format_table(reports))
    return 0 if all(r.passed for r in reports) else 1


if __name__ == "__main__":
    # Run the imported module's main: kernel modules register their cases there, not in __main__.
    from ascendkit.kernels import ascend_gate

    sys.exit(ascend_gate.main())
