"""Device peaks for roofline reports: published figures for NPU/GPU, measured on this CPU."""
from __future__ import annotations

import functools
import os
import time
from dataclasses import dataclass

import torch

from ascendtile.platform import cpu_isa, device_kind


@dataclass(frozen=True)
class DevicePeak:
    name: str
    hbm_gbps: float  # memory bandwidth, GB/s
    matrix_tflops: float  # dense fp16/bf16 matrix throughput (the CPU: GEMM in the dtype asked for), TFLOP/s
    source: str


# Published figures (conflicting sources are noted in ascend-kernel-rules.md; these are the common ones).
PEAKS = {
    "ascend910b": DevicePeak("Ascend 910B (A2)", 1600.0, 313.0, "published, fp16 dense"),
    "h100": DevicePeak("NVIDIA H100 SXM", 3350.0, 989.0, "published, bf16 dense"),
}


@functools.lru_cache(maxsize=None)
def measured_cpu_peak(dtype: torch.dtype = torch.float32) -> DevicePeak:
    """This CPU, measured once per process and dtype: large-copy bandwidth and GEMM throughput in
    dtype (bf16 is fast only with bf16 dot products: avx512_bf16 or AMX, see platform.cpu_isa)."""
    src = torch.empty(64 * 1024 * 1024 // 4, dtype=torch.float32).fill_(1.0)
    dst = torch.empty_like(src)
    dst.copy_(src)
    reps, t0 = 5, time.perf_counter()
    for _ in range(reps):
        dst.copy_(src)
    gbps = 2 * src.numel() * 4 * reps / (time.perf_counter() - t0) / 1e9
    return DevicePeak(f"this CPU ({os.cpu_count()} cores, {cpu_isa()})", gbps, _gemm_tflops(dtype),
                      f"measured, {str(dtype).removeprefix('torch.')} GEMM")


def _gemm_tflops(dtype: torch.dtype) -> float:
    """Square GEMMs of 256, 512, then 1024, stopping at the first that takes 50 ms or more: a
    dtype without a fast path here (bf16 without bf16 dot products: ~2.5 s per 1024^3 GEMM on one
    AVX2 core) is measured at a size where it still fills the cores, in a second, not fifteen."""
    n = 256
    while True:
        a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
        a @ b
        reps, t0 = 0, time.perf_counter()
        while reps < 3 or time.perf_counter() - t0 < 0.1:
            a @ b
            reps += 1
        seconds = (time.perf_counter() - t0) / reps
        if n == 1024 or seconds >= 0.05:
            return 2 * n**3 / seconds / 1e12
        n *= 2


def current_peak(dtype: torch.dtype = torch.float32) -> DevicePeak:
    """The device's peak; on CPU measured in dtype (NPU/GPU: the published 16-bit figure)."""
    kind = device_kind()
    if kind == "npu":
        return PEAKS["ascend910b"]
    if kind == "cuda":
        return PEAKS["h100"]
    return measured_cpu_peak(dtype)


def peak_rows() -> list[tuple[str, str]]:
    """Rows for `ascendtile info`: every published peak and this CPU's measured one."""
    return [(f"peak: {peak.name}", f"{peak.hbm_gbps:,.0f} GB/s, {peak.matrix_tflops:,.2f} TFLOP/s ({peak.source})")
            for peak in (*PEAKS.values(), measured_cpu_peak())]
