"""Kernel benchmark cases, one module per op family (named like its kernels/ module).

A family module registers a producer with `@bench_cases("<family>")`; the producer returns one
`KernelCase` per (op, real model shape) with the bytes moved and FLOPs computed from the shape,
a `setup` that allocates inputs on a device and returns the call to time (the registered
`torch.ops.ascend.*` op: the Triton kernel on NPU/CUDA, the torch reference on CPU) and, where
torch_npu has a fused op for the same job, a `baseline` setup that times it on NPU.
"""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from typing import Callable

import torch

import ascendkit.ops  # noqa: F401  (registers torch.ops.ascend.*, which the cases call)
from ascendkit.kernels.shape_grid import HIDDEN_SIZES

Setup = Callable[[torch.device], Callable[[], object]]

# Tokens per call: single-stream decode (launch-bound), a decode batch, a prefill chunk.
NUM_TOKENS = (1, 32, 2048)
QUICK_TOKENS = (7,)


@dataclass(frozen=True)
class KernelCase:
    family: str
    op: str
    shape: dict[str, int]
    dtype: torch.dtype
    bytes_moved: int  # compulsory HBM traffic: every input read once, every output written once
    flops: int  # arithmetic the op needs (elementwise ops count each add/mul/exp as one)
    setup: Setup
    baseline: Setup | None = None  # the torch_npu fused op doing the same job (run on NPU only)
    baseline_name: str = ""

    @property
    def name(self) -> str:
        dims = ",".join(f"{k}={v}" for k, v in self.shape.items())
        return f"{self.op}[{dims},{str(self.dtype).removeprefix('torch.')}]"


_PRODUCERS: dict[str, Callable[[torch.dtype, bool], list[KernelCase]]] = {}


def bench_cases(family: str) -> Callable:
    """Register a family's producer: producer(dtype, quick) -> list[KernelCase]."""
    def register(producer: Callable[[torch.dtype, bool], list[KernelCase]]) -> Callable:
        _PRODUCERS[family] = producer
        return producer

    return register


def families() -> list[str]:
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")
    return sorted(_PRODUCERS)


def all_cases(dtype: torch.dtype, quick: bool, only: list[str] | None = None) -> list[KernelCase]:
    """Every registered family's cases (or only the named families)."""
    known = families()
    unknown = set(only or ()) - set(known)
    if unknown:
        raise ValueError(f"families: unknown benchmark families {sorted(unknown)}; known: {known}")
    return [case for fam in known if not only or fam in only for case in _PRODUCERS[fam](dtype, quick)]


def hidden_sizes(quick: bool) -> tuple[int, ...]:
    return HIDDEN_SIZES[:1] if quick else HIDDEN_SIZES


def token_counts(quick: bool) -> tuple[int, ...]:
    return QUICK_TOKENS if quick else NUM_TOKENS


def element_size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def torch_npu():
    """torch_npu, imported only when an NPU baseline is actually built."""
    import torch_npu as module

    return module
