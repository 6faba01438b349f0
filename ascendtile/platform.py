"""Device detection and core counts for kernel grids."""
from __future__ import annotations

import functools
import os

import torch


@functools.lru_cache(maxsize=None)
def device_kind() -> str:
    """'npu' when torch_npu is importable and an NPU is available, else 'cuda', else 'cpu'."""
    try:
        import torch_npu  # noqa: F401

        if torch.npu.is_available():
            return "npu"
    except ImportError:
        pass
    if torch.cuda.is_available():
        return "cuda"
    return "cpu"


def default_device() -> torch.device:
    return torch.device(device_kind() if device_kind() != "npu" else "npu:0")


@functools.lru_cache(maxsize=None)
def _npu_properties(index: int) -> dict:
    # triton-ascend's driver answers num_aicore / num_vectorcore; ask once per device.
    import triton

    return dict(triton.runtime.driver.active.utils.get_device_properties(index))


# Under the Triton interpreter programs run one after another, so a small grid keeps tests fast
# while still exercising the persistent loop (more work items than programs).
INTERPRETER_GRID = 4


def core_counts(device: torch.device | str | None = None) -> dict[str, int]:
    """Physical cores a kernel grid should be sized to: cube (`tl.dot`) and vector cores."""
    device = torch.device(device) if device is not None else default_device()
    if device.type in ("npu", "privateuseone"):
        props = _npu_properties(device.index or 0)
        return {"cube": int(props["num_aicore"]), "vector": int(props["num_vectorcore"])}
    if device.type == "cuda":
        sms = torch.cuda.get_device_properties(device).multi_processor_count
        return {"cube": sms, "vector": sms}
    return {"cube": INTERPRETER_GRID, "vector": INTERPRETER_GRID}


def grid_size(device: torch.device, work_items: int, *, uses_dot: bool = False) -> int:
    """1-D persistent grid: one program per core (cube cores for `tl.dot` kernels), never more
    programs than work items, at least one."""
    cores = core_counts(device)["cube" if uses_dot else "vector"]
    return max(1, min(cores, int(work_items)))


# Tokens per KV-cache block when the caller names none. On NPU 128: vllm-ascend's attention requires
# it, and the attention kernels read a block as whole 64-128-key tiles (fewer cube<->vector
# hand-offs per key, see docs/ascend-kernel-rules.md). CPU and CUDA keep 16: less cache lost to
# partly filled blocks, and the CPU path's speed does not depend on it.
DEFAULT_BLOCK_SIZES = {"npu": 128, "privateuseone": 128, "cuda": 16, "cpu": 16}


def default_block_size(device: torch.device | str | None = None) -> int:
    """The KV-cache block size for `device` (default: this process's device) when none is given."""
    device = torch.device(device) if device is not None else default_device()
    return DEFAULT_BLOCK_SIZES.get(device.type, 16)


def device_graph_type(device_type: str) -> type | None:
    """The class that captures and replays device work on `device_type`: torch.npu.NPUGraph
    (torch_npu) on NPU, torch.cuda.CUDAGraph on CUDA; None where nothing is captured (CPU)."""
    if device_type == "npu":
        return torch.npu.NPUGraph
    if device_type == "cuda":
        return torch.cuda.CUDAGraph
    return None


# The x86 vector and matrix extensions that decide CPU speed per dtype: AVX2 (fp32 only fast),
# AVX-512, bf16 dot products (avx512_bf16), int8 dot products (VNNI), AMX tiles.
ISA_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8")


def isa_from_cpuinfo(cpuinfo: str) -> str:
    """The ISA_FLAGS present in a /proc/cpuinfo text, in that order, joined by " + " ("none" when
    it lists none of them, e.g. a non-x86 CPU)."""
    flags = set()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags.update(line.partition(":")[2].split())
    return " + ".join(f for f in ISA_FLAGS if f in flags) or "none"


def cpu_has_bf16_dot() -> bool:
    """bf16 dot products in hardware (AVX-512 BF16 or AMX): where a bf16 GEMM beats fp32. Without
    them (AVX2) oneDNN refuses a bf16 weight reorder anyway."""
    return torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()


def cpu_has_int8_dot() -> bool:
    """int8 dot products in hardware (AVX-512 VNNI or AMX): where torch._int_mm beats fp32."""
    return torch.cpu._is_vnni_supported() or torch.cpu._is_amx_tile_supported()


def vendor_from_cpuinfo(cpuinfo: str) -> str:
    """The `vendor_id` of a /proc/cpuinfo text ("GenuineIntel", "AuthenticAMD", ...), "unknown" when
    it names none (e.g. a non-x86 CPU)."""
    for line in cpuinfo.splitlines():
        if line.startswith("vendor_id"):
            return line.partition(":")[2].strip()
    return "unknown"


def _cpuinfo() -> str | None:
    """/proc/cpuinfo's text, None where there is none (not Linux)."""
    try:
        with open("/proc/cpuinfo") as f:
            return f.read()
    except OSError:
        return None


@functools.lru_cache(maxsize=None)
def cpu_vendor() -> str:
    """This machine's CPU vendor (vendor_from_cpuinfo), "unknown" without /proc/cpuinfo."""
    cpuinfo = _cpuinfo()
    return "unknown" if cpuinfo is None else vendor_from_cpuinfo(cpuinfo)


@functools.lru_cache(maxsize=None)
def cpu_isa() -> str:
    """This machine's CPU extensions (isa_from_cpuinfo), "unknown" without /proc/cpuinfo."""
    cpuinfo = _cpuinfo()
    return "unknown" if cpuinfo is None else isa_from_cpuinfo(cpuinfo)


def report() -> list[tuple[str, str]]:
    """Device and version rows for `ascendtile info`."""
    import importlib.metadata as md

    def version(pkg: str) -> str:
        try:
            return md.version(pkg)
        except md.PackageNotFoundError:
            return "not installed"

    kind = device_kind()
    rows = [
        ("device", kind),
        ("CPU ISA", cpu_isa()),
        ("CPU vendor", cpu_vendor()),
        ("torch", torch.__version__),
        ("triton-ascend", version("triton-ascend")),
        ("triton (upstream)", version("triton")),
        ("torch-npu", version("torch-npu")),
        ("kernel path on CPU", os.environ.get("ASCENDTILE_KERNELS", "reference")),
        ("TRITON_INTERPRET", os.environ.get("TRITON_INTERPRET", "0")),
    ]
    if kind != "cpu":
        cores = core_counts()
        rows += [("cube cores", str(cores["cube"])), ("vector cores", str(cores["vector"]))]
    return rows
