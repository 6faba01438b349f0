"""Ascend gate: every kernel family's cases (lowering/cases/) through both stages of the Ascend
compiler that run on this CPU — triton-ascend's front end to Linalg (frontend.py), then
bishengir-compile's HFusion/HIVM pipeline up to the hivmc hand-off (hivm.py) — and a verdict.

A case passes when both stages succeed, it runs in the expected core mode ("aiv" vector-only, or
"mix" cube + vector for `tl.dot`), it has no element-granular gather or scatter and no masked
store turned read-modify-write, the compiler kept multibuffering on, and the planned unified
buffer leaves headroom (UB_LIMIT_BYTES).

Kernels decorated under TRITON_INTERPRET=1 are interpreter objects the code generator cannot
lower, so `run_gate` runs in a fresh subprocess whenever the interpreter is on.
"""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from ascendtile.lowering.case import LoweringCase
from ascendtile.lowering.cases import all_cases, cases_of, check_families
from ascendtile.lowering.frontend import TARGET_ARCH, backend, inspect_lowered, lower_to_linalg
from ascendtile.lowering.hivm import HivmResult, compile_hivm

# Unified buffer is 192 KB per core; a plan above 160 KB leaves the planner no room to keep
# double buffering when a variant grows, so the gate asks for that headroom.
UB_LIMIT_BYTES = 160 * 1024


@dataclass
class LoweringReport:
    name: str
    ok: bool  # stage 1: lowered to Linalg
    mix_mode: str = ""
    expect_mode: str = ""
    discrete_sites: int = 0  # DiscreteMemAccess annotations (row- or element-granular)
    element_gathers: int = 0  # discrete loads that move one element per iteration
    element_scatters: int = 0  # likewise for stores
    rmw_stores: int = 0  # masked stores lowered to read + select + write of the whole tile
    error: str = ""
    hivm_ok: bool = False  # stage 2: bishengir-compile reached the hivmc hand-off
    hivm_error: str = ""
    ub_bytes: int = 0  # planned by the compiler, per core
    l1_bytes: int = 0
    l0c_bytes: int = 0
    pipe_barriers: int = 0  # static cost from the HIVM IR
    sync_flags: int = 0
    cube_vector_syncs: int = 0
    int_compares: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def hazards(self) -> list[str]:
        if not self.ok:
            return [f"lowering failed: {self.error}"]
        found = []
        if self.mix_mode != self.expect_mode:
            found.append(f"mode {self.mix_mode}, expected {self.expect_mode}")
        if self.element_gathers:
            found.append(f"{self.element_gathers} element-granular gather(s)")
        if self.element_scatters:
            found.append(f"{self.element_scatters} element-granular scatter(s)")
        if self.rmw_stores:
            found.append(f"{self.rmw_stores} masked store(s) lowered to read-modify-write")
        if not self.hivm_ok:
            found.append(f"bishengir-compile failed: {self.hivm_error}")
        if any("multi-buffer" in note for note in self.notes):
            found.append("compiler dropped multibuffering (UB overflow retry)")
        if self.ub_bytes > UB_LIMIT_BYTES:
            found.append(f"planned UB {self.ub_bytes / 1024:.1f} KB > {UB_LIMIT_BYTES // 1024} KB")
        return found

    @property
    def passed(self) -> bool:
        return not self.hazards


def _front(case: LoweringCase) -> tuple[LoweringReport, str | None]:
    report = LoweringReport(case.name, ok=False, expect_mode=case.expect_mode)
    try:
        lowered = lower_to_linalg(case)
    except subprocess.CalledProcessError as exc:
        lines = (exc.stderr or b"").decode(errors="replace").strip().splitlines()
        report.error = lines[-1] if lines else str(exc)
        return report, None
    except Exception as exc:  # compile errors from the front end surface as many types
        report.error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}"
        return report, None
    report.ok = True
    for key, value in inspect_lowered(lowered).items():
        setattr(report, key, value)
    return report, lowered


def _merge(report: LoweringReport, result: HivmResult) -> LoweringReport:
    report.hivm_ok, report.hivm_error, report.notes = result.ok, result.error, result.notes
    for key, value in {**result.planned, **result.cost}.items():
        setattr(report, key, value)
    return report


def lower_all(cases: list[LoweringCase]) -> list[LoweringReport]:
    """Both stages in this process (kernels must be JITFunctions, not interpreted). The front end
    runs case by case; bishengir-compile runs are separate processes, one per core."""
    fronts = [_front(case) for case in cases]
    options = backend().parse_options({})
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        results = list(pool.map(lambda f: compile_hivm(f[1], TARGET_ARCH, options) if f[1] else None, fronts))
    return [_merge(report, result) if result else report for (report, _), result in zip(fronts, results)]


def run_gate(families: list[str] | None = None, cases_from: str | None = None) -> list[LoweringReport]:
    """Every case of the given families (default: all), or the cases `module:function` returns
    (e.g. the gate's positive controls); in a clean subprocess if the interpreter is on here.
    Unknown families are a ValueError here, before any subprocess."""
    check_families(families)
    if os.environ.get("TRITON_INTERPRET", "0") != "1":
        return lower_all(cases_of(cases_from) if cases_from else all_cases(families))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)  # what imports here imports there
    cmd = [sys.executable, "-m", "ascendtile.lowering.gate", "--json"]
    for fam in families or ():
        cmd += ["--family", fam]
    if cases_from:
        cmd += ["--cases", cases_from]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"lowering gate subprocess failed:\n{done.stderr[-4000:]}")
    return [LoweringReport(**row) for row in json.loads(done.stdout)]


def format_table(reports: list[LoweringReport]) -> str:
    header = (f"{'kernel case':<58} {'mode':<4} {'disc':>4} {'elem':>4} {'UB KB':>6} {'L1 KB':>6} {'L0C KB':>6} "
              f"{'barr':>4} {'flags':>5} {'c<>v':>4} {'icmp':>4}  result")
    lines = [header, "-" * len(header)]
    for r in reports:
        verdict = "ok" if r.passed else "FAIL: " + "; ".join(r.hazards)
        lines.append(f"{r.name:<58} {r.mix_mode:<4} {r.discrete_sites:>4} {r.element_gathers:>4} "
                     f"{r.ub_bytes / 1024:>6.1f} {r.l1_bytes / 1024:>6.1f} {r.l0c_bytes / 1024:>6.1f} "
                     f"{r.pipe_barriers:>4} {r.sync_flags:>5} {r.cube_vector_syncs:>4} {r.int_compares:>4}  {verdict}")
    failed = sum(not r.passed for r in reports)
    lines.append(f"{len(reports) - failed} passed, {failed} failed (target {TARGET_ARCH}: front end + "
                 f"bishengir-compile to the hivmc hand-off, planned UB <= {UB_LIMIT_BYTES // 1024} KB)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="Compile ascendtile kernels for Ascend on this CPU (both stages).")
    parser.add_argument("--json", action="store_true", help="print reports as JSON")
    parser.add_argument("--family", action="append", help="only this kernel family (repeatable)")
    parser.add_argument("--cases", help="MODULE:FUNCTION returning LoweringCases, instead of the families")
    args = parser.parse_args(argv)
    reports = run_gate(args.family, args.cases)
    if args.json:  # the caller judges the reports
        print(json.dumps([dataclasses.asdict(r) for r in reports]))
        return 0
    print(format_table(reports))
    return 0 if all(r.passed for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
