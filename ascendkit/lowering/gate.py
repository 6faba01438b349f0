"""Ascend lowering gate: lower every kernel family's cases (lowering/cases/) for Ascend on this
CPU with triton-ascend's own compiler (frontend.py) and report hazards.

A case passes when it lowers, runs in the expected core mode ("aiv" vector-only, or "mix" cube +
vector for `tl.dot`), has no element-granular gather, and its on-chip buffer estimate stays
under the per-iteration UB budget.

Kernels decorated under TRITON_INTERPRET=1 are interpreter objects the code generator cannot
lower, so `run_gate` runs the lowering in a fresh subprocess whenever the interpreter is on.
"""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from dataclasses import dataclass

from ascendkit.lowering.case import LoweringCase
from ascendkit.lowering.cases import all_cases
from ascendkit.lowering.frontend import TARGET_ARCH, inspect_lowered, lower_to_linalg

# Unified buffer is 192 KB per core; double buffering halves what one loop iteration may hold.
UB_BUDGET_BYTES = 96 * 1024


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


def lower(case: LoweringCase) -> LoweringReport:
    """Lower one case in this process (the kernel must be a JITFunction, not interpreted)."""
    report = LoweringReport(case.name, ok=False, expect_mode=case.expect_mode)
    try:
        lowered = lower_to_linalg(case)
    except subprocess.CalledProcessError as exc:
        lines = (exc.stderr or b"").decode(errors="replace").strip().splitlines()
        report.error = lines[-1] if lines else str(exc)
        return report
    except Exception as exc:  # compile errors from the front end surface as many types
        report.error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}"
        return report
    report.ok = True
    for key, value in inspect_lowered(lowered).items():
        setattr(report, key, value)
    return report


def run_gate(families: list[str] | None = None) -> list[LoweringReport]:
    """Lower every case of the given families (default: all); in a clean subprocess if the
    interpreter is on here."""
    if os.environ.get("TRITON_INTERPRET", "0") != "1":
        return [lower(case) for case in all_cases(families)]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    cmd = [sys.executable, "-m", "ascendkit.lowering.gate", "--json"]
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
    sys.exit(main())
