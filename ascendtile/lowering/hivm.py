"""Stage 2 of the Ascend compiler on this CPU: BiShengIR's `bishengir-compile` (PyPI wheel
`ascendnpu-ir`) takes the Linalg IR through HFusion and HIVM — cube/vector split, multibuffering,
sync insertion, on-chip memory planning — with the flags triton-ascend passes for A2/A3, and
stops at the hand-off to `hivmc` (CANN's binary emitter, absent here). What it leaves behind is
the compiler's own verdict: its memory plan (memory_info_aiv.json / memory_info_aic.json) and
the HIVM IR (module.hivm.opt.mlir), read here for planned bytes and a static cost."""
from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The only failure expected on a machine without CANN: the pipeline ran to the binary emitter.
HANDOFF = "External hivmc run fails"
# Memory scopes of the plan: unified buffer (vector), L1 (cube input), L0C (cube accumulator).
SCOPES = {"ub": "ub_bytes", "cbuf": "l1_bytes", "cc": "l0c_bytes"}
# Static cost read from the HIVM IR, per kernel (counts of ops in the optimized module).
COST_OPS = {
    "pipe_barriers": r"hivm\.hir\.pipe_barrier\b",
    "sync_flags": r"hivm\.hir\.(?:set|wait)_flag\b",
    "cube_vector_syncs": r"hivm\.hir\.sync_block_(?:set|wait)\b",  # cube <-> vector hand-offs
    # integer vector compares (vcmp/vcmps library calls on int tiles): scalar code on A2/A3
    "int_compares": r"call @vcmps?_\w+_u?int(?:8|16|32|64)_t\b",
}


@dataclass
class HivmResult:
    ok: bool
    error: str = ""
    planned: dict[str, int] = field(default_factory=dict)  # ub_bytes / l1_bytes / l0c_bytes
    cost: dict[str, int] = field(default_factory=dict)
    # The compiler's own retreats, e.g. "Ub overflow detected; automatically set
    # enable-auto-multi-buffer to false and retrying": the kernel compiled without double buffering.
    notes: list[str] = field(default_factory=list)


def compiler_path() -> Path:
    found = shutil.which("bishengir-compile")
    if found:
        return Path(found)
    spec = importlib.util.find_spec("ascendnpuir")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("bishengir-compile: not on PATH and the ascendnpu-ir package is not installed "
                                "(pip install ascendnpu-ir, or the 'ascend' extra)")
    return Path(spec.submodule_search_locations[0]) / "bin" / "bishengir-compile"


def compile_flags(options: Any) -> list[str]:
    """triton-ascend's A2/A3 bishengir-compile flags (linalg_to_bin_enable_npu_compile_A2_A3) for
    the backend options in force, plus the memory report; threading off keeps runs deterministic
    (threaded runs crashed now and then under CPU load)."""
    flags = [f"--enable-auto-multi-buffer={str(options.multibuffer).lower()}"]
    if options.enable_auto_bind_sub_block is not None:
        flags.append(f"--enable-auto-bind-sub-block={str(options.enable_auto_bind_sub_block).lower()}")
    return flags + ["--enable-hfusion-compile=true", "--enable-hivm-compile=true", "--enable-triton-kernel-compile=true",
                    "--enable-memory-display", "--mlir-disable-threading"]


def planned_bytes(report: dict) -> dict[str, int]:
    """Bytes per scope a memory_info report plans: the highest end of any buffer copy. Extents
    are in bits, offsets in bytes (a 4096 x f16 buffer has extent 65536); a multibuffered
    allocation lists one offset per copy."""
    planned: dict[str, int] = {}
    for record in report.get("Record", []):
        key = SCOPES.get(record.get("scope", ""))
        if key is None:
            continue
        for buffer in record.get("memory_info_array", []):
            end = max(offset + buffer["extent"] // 8 for offset in buffer["offset"])
            planned[key] = max(planned.get(key, 0), end)
    return planned


def static_cost(hivm_ir: str) -> dict[str, int]:
    return {name: len(re.findall(pattern, hivm_ir)) for name, pattern in COST_OPS.items()}


def compile_hivm(linalg: str, target: str, options: Any) -> HivmResult:
    """Run bishengir-compile on one kernel's Linalg IR for `target` (e.g. Ascend910B4)."""
    with tempfile.TemporaryDirectory(prefix="ascendtile-hivm-") as tmp:
        work = Path(tmp)
        (work / "kernel.mlir").write_text(linalg)
        cmd = [str(compiler_path()), "kernel.mlir", f"--target={target}", *compile_flags(options),
               "--save-temps=temps", "-o", "kernel"]
        (work / "temps").mkdir()
        done = subprocess.run(cmd, cwd=work, capture_output=True, text=True, check=False)
        output = done.stdout + done.stderr
        lines = output.splitlines()
        notes = [line.removeprefix("[NOTE]").strip() for line in lines if line.startswith("[NOTE]")]
        errors = [line.split("error:", 1)[1].strip() for line in lines if "error:" in line and HANDOFF not in line]
        optimized = work / "temps" / "module.hivm.opt.mlir"
        if done.returncode < 0:
            return HivmResult(False, f"bishengir-compile died with signal {-done.returncode}", notes=notes)
        if errors or HANDOFF not in output or not optimized.is_file():
            # the specific cause (e.g. "ub overflow, requires N bits ...") over the generic "Failed to run"
            specific = [e for e in errors if not e.startswith("Failed to run")]
            detail = (specific or errors or [line for line in lines if line.strip()] or ["no output"])[-1]
            return HivmResult(False, detail.strip(), notes=notes)
        planned: dict[str, int] = {}
        for report in work.glob("memory_info_*.json"):
            for key, value in planned_bytes(json.loads(report.read_text())).items():
                planned[key] = max(planned.get(key, 0), value)
        return HivmResult(True, planned=planned, cost=static_cost(optimized.read_text()), notes=notes)
