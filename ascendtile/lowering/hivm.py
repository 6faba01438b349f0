"""Stage 2 of the Ascend compiler on this CPU: BiShengIR's `bishengir-compile` (PyPI wheel
`ascendnpu-ir`) takes the Linalg IR through HFusion and HIVM — cube/vector split, multibuffering,
sync insertion, on-chip memory planning — with the flags triton-ascend passes for A2/A3, and
stops at the hand-off to `hivmc` (CANN's binary emitter, absent here). What it leaves behind is
the compiler's own verdict: the planned HIVM IR (module.hivm.opt.mlir), whose on-chip buffers sit
at the addresses its memory planner gave them, read here for planned bytes and a static cost."""
from __future__ import annotations

import importlib.util
import math
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
# A planned buffer: `hivm.hir.pointer_cast(%offset) : memref<4x16xf32, #hivm.address_space<ub>>`,
# the offset an i64 constant in bytes (a multibuffered buffer is one cast per copy).
POINTER_CAST = re.compile(r"hivm\.hir\.pointer_cast\(([^)]*)\)[^\n]*?#hivm\.address_space<(\w+)>")
BUFFER = re.compile(r"hivm\.hir\.pointer_cast\((%[\w.]+)\) : memref<((?:\d+x)+)(\w+), #hivm\.address_space<")
I64_CONSTANT = re.compile(r"(%[\w.]+) = arith\.constant (\d+) : i64")
ELEMENT_BYTES = {"i1": 1, "i8": 1, "i16": 2, "f16": 2, "bf16": 2, "i32": 4, "f32": 4, "i64": 8}
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
    the backend options in force; threading off keeps runs deterministic (threaded runs crashed
    now and then under CPU load). Not `--enable-memory-display`: its JSON report states the plan
    the IR already holds (equal on every gate case, 2026-11-28) and costs ~20 % of each run."""
    flags = [f"--enable-auto-multi-buffer={str(options.multibuffer).lower()}"]
    if options.enable_auto_bind_sub_block is not None:
        flags.append(f"--enable-auto-bind-sub-block={str(options.enable_auto_bind_sub_block).lower()}")
    return flags + ["--enable-hfusion-compile=true", "--enable-hivm-compile=true", "--enable-triton-kernel-compile=true",
                    "--mlir-disable-threading"]


def planned_bytes(hivm_ir: str) -> dict[str, int]:
    """Bytes per on-chip scope the planned HIVM IR uses: the highest end (offset + bytes) of any
    buffer. A cast into an on-chip scope this cannot read is a ValueError, never a smaller plan."""
    offsets = dict(I64_CONSTANT.findall(hivm_ir))
    planned: dict[str, int] = {}
    for cast in POINTER_CAST.finditer(hivm_ir):
        key = SCOPES.get(cast.group(2))
        if key is None:
            continue
        buffer = BUFFER.match(cast.group(0))
        if buffer is None or buffer.group(1) not in offsets or buffer.group(3) not in ELEMENT_BYTES:
            raise ValueError(f"planned buffer not understood: {cast.group(0)}")
        size = math.prod(int(d) for d in buffer.group(2)[:-1].split("x")) * ELEMENT_BYTES[buffer.group(3)]
        planned[key] = max(planned.get(key, 0), int(offsets[buffer.group(1)]) + size)
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
        hivm_ir = optimized.read_text()
        return HivmResult(True, planned=planned_bytes(hivm_ir), cost=static_cost(hivm_ir), notes=notes)
