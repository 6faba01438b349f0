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

import ascendtile.ops  # noqa: F401  (registers torch.ops.ascend.*, which the cases call)
from ascendtile.lowering.shape_grid import HIDDEN_SIZES

Setup = Callable[[torch.device], Callable[[], object]]

# Tokens per call: single-stream decode (launch-bound), a decode batch, a prefill chunk.
NUM_TOKENS = (1, 32, 2048)
QUICK_TOKENS = (7,)
# Attention layouts of real models (query heads, KV heads, head dim): SmolLM2-135M, Llama-3.2-1B,
# Llama-2-7B; head dims are shape_grid.HEAD_DIMS' 64 and 128. KV cache block size as vllm-ascend uses.
ATTENTION_LAYOUTS = {"smollm2": (9, 3, 64), "llama3.2-1b": (32, 8, 64), "llama2-7b": (32, 32, 128)}
CACHE_BLOCK_SIZE = 128
# The CPU runs the torch references: cases above this much work would take seconds per call there.
CPU_MAX_FLOPS = 2e10
CPU_MAX_BYTES = 1e9


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


def fits_cpu(case: KernelCase) -> bool:
    return case.flops <= CPU_MAX_FLOPS and case.bytes_moved <= CPU_MAX_BYTES


def hidden_sizes(quick: bool) -> tuple[int, ...]:
    return HIDDEN_SIZES[:1] if quick else HIDDEN_SIZES


def token_counts(quick: bool) -> tuple[int, ...]:
    return QUICK_TOKENS if quick else NUM_TOKENS


def attention_layouts(quick: bool) -> dict[str, tuple[int, int, int]]:
    return dict(list(ATTENTION_LAYOUTS.items())[:1]) if quick else ATTENTION_LAYOUTS


def element_size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def distinct_slots(tokens: int, num_blocks: int, block_size: int, device: torch.device) -> torch.Tensor:
    """slot_mapping [tokens] int64: distinct random cache slots (block_id * block_size + offset)."""
    return torch.randperm(num_blocks * block_size, device=device)[:tokens]


def torch_npu():
    """torch_npu, imported only when an NPU baseline is actually built."""
    import torch_npu as module

    return module
