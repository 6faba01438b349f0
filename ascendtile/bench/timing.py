"""Wall-clock timing of a zero-argument callable on any device, synchronised at both ends."""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable

import torch


def synchronize(device: torch.device) -> None:
    """Wait for queued device work (no-op on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type in ("npu", "privateuseone"):
        torch.npu.synchronize(device)


@dataclass(frozen=True)
class Timing:
    median_s: float  # per call, median over repeats
    min_s: float
    calls: int  # total timed calls

    @property
    def median_us(self) -> float:
        return self.median_s * 1e6


def measure(fn: Callable[[], object], device: torch.device, *, min_time_s: float = 0.2, repeats: int = 5) -> Timing:
    """Per-call time of `fn`: one warm-up call (compilation, caches), then `repeats` batches of
    back-to-back calls, each batch timed between device synchronisations so queued kernels are
    counted. Batch size is chosen so a batch lasts about min_time_s / repeats; launch overhead is
    part of the measured time, as it is in a real forward pass."""
    fn()
    synchronize(device)
    t0 = time.perf_counter()
    fn()
    synchronize(device)
    single = max(time.perf_counter() - t0, 1e-7)
    per_batch = max(1, int(min_time_s / repeats / single))
    samples = []
    for _ in range(repeats):
        synchronize(device)
        t0 = time.perf_counter()
        for _ in range(per_batch):
            fn()
        synchronize(device)
        samples.append((time.perf_counter() - t0) / per_batch)
    return Timing(statistics.median(samples), min(samples), per_batch * repeats)
