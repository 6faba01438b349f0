"""The CPU fast path of a W4A16 linear: torch's weight-only int4 GEMM
(`torch._weight_int4pack_mm_for_cpu`) on a copy of the 4-bit weight in its packed layout
(`torch._convert_weight_to_int4pack_for_cpu`), with bf16 activations.

torch's kernel computes w = (q − 8)·scale + zero per group from `scale_and_zeros` [K/g, N, 2] in
the activation dtype, so our w = q·scale + min becomes zero = min + 8·scale, both rounded to bf16:
not the exact fp32 weights the op multiplies (ascendtile.ops.w4a16_linear), a bf16-activation
model's rounding. It takes groups g of 32, 64, 128 or 256 (a larger quantization group, e.g.
compressed-tensors' "channel", repeats its scale over several g) and N a multiple of 16.

Measured (2026-11-25, 2-core Intel Xeon, avx2 + avx512_bf16 + avx512_vnni, no AMX; 10 SmolLM2 layers' q/k/v, o,
gate/up and down linears, distinct random weights, group 32, bf16 x, ms for all 40, best of 5; at
1 thread, as 2-thread runs on this shared machine were unstable; the op is ascendtile.ops.w4a16_linear's
CPU path (dequantize 512 rows at a time to fp32, fp32 GEMM); the float columns need a 16- or 32-bit
copy of the weights, which W4A16 does not keep):
  | rows | int4pack | op | bf16 oneDNN (float model) | fp32 oneDNN (float model) |
  |---:|---:|---:|---:|---:|
  | 1 | 2.6 | 60.0 | 7.0 | 11.0 |
  | 8 | 9.0 | 66.4 | 11.9 | 14.7 |
  | 32 | 34.4 | 82.4 | 31.5 | 25.4 |
  | 64 | 68.4 | 103.5 | 56.9 | 38.0 |
  | 128 | 136.4 | 132.9 | 111.3 | 72.2 |
  | 256 | 269.2 | 205.7 | 211.6 | 118.5 |
  | 512 | 543.2 | 341.8 | 427.2 | 243.4 |
At 2 threads (a quieter earlier run) the same crossing: int4pack 68.2 vs op 73.3 ms at 128 rows,
273.8 vs 180.7 at 512; 1.3 ms at 1 row. int4pack's time grows in proportion to the rows, the
op's dequantization is a fixed cost its GEMM amortises:
int4pack up to INT4PACK_MAX_ROWS, the op above. fp16 activations run the kernel's unvectorised
path on this CPU (57 ms at 1 row, 43x bf16), fp32 ones too (20-100x slower, reference-facts): those
take the op.

The kernel needs no bf16 dot products: its bf16 path widens to fp32 and multiplies with AVX2 or
AVX-512 FMAs. Measured again on a 2-core AMD EPYC with avx2 only (2026-11-26, 2 threads, same 40
linears and columns, best of 5): 3.5 / 12.6 / 34.0 / 173.1 ms at 1 / 8 / 32 / 128 rows, against
77.9 / 90.2 / 128.7 / 188.4 for the op and 15.3 / 33.9 / 48.1 / 120.4 for fp32 aten (no oneDNN
pack); bench/results/2026-11-26-w4a16-avx2.md. So int4pack runs wherever torch's CPU kernels are
AVX2 or AVX-512 builds (VECTOR_CAPABILITIES); other CPUs (e.g. ARM, or ATEN_CPU_CAPABILITY=default)
were never measured and take the op.
"""
from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from ascendtile.ops.reference.w4a16 import unpack_nibbles

# Groups torch's CPU kernel takes, largest first.
KERNEL_GROUPS = (256, 128, 64, 32)
# torch's packed layout blocks 16 output rows.
ROW_BLOCK = 16
# torch.backends.cpu.get_cpu_capability() values whose int4 kernel is vectorised for bf16 (see above).
VECTOR_CAPABILITIES = ("AVX2", "AVX512")
# Rows of activations up to which int4pack beats the op (the table above: they cross at ~128 rows).
INT4PACK_MAX_ROWS = 128

# True while a compiled graph whose guards decide between its entries traces and runs through
# Dynamo (CPU level 2's decode graph, compilation/compiled_model.py). Only such a graph may take the
# pack: its row bound becomes a guard on the batch size, which the decode graph's direct calls key
# their entries by too, and the general level-2 graph, which runs without evaluating guards, must
# not depend on a size. Dynamo guards on this global too.
_in_guarded_graph = False


@contextlib.contextmanager
def guarded_graph() -> Iterator[None]:
    """Lets compiled W4A16 linears take their packs while the block runs (see _in_guarded_graph)."""
    global _in_guarded_graph
    previous, _in_guarded_graph = _in_guarded_graph, True
    try:
        yield
    finally:
        _in_guarded_graph = previous


def in_guarded_graph() -> bool:
    """Whether a guarded graph (see _in_guarded_graph) is being traced or run."""
    return _in_guarded_graph


@dataclass(frozen=True)
class Int4Pack:
    """A W4A16 weight packed for torch's int4 kernel, valid while `sources` (qweight, scales, mins)
    are the same tensors at the same versions (None: inference tensors, which have none). A compiled
    graph cannot read version counters: it takes the pack prepack() made, as Inductor's freezing
    keeps the weights it froze, so weights changed in place after compiling need prepack() again."""
    sources: tuple[torch.Tensor, torch.Tensor, torch.Tensor]
    versions: tuple[int | None, ...]
    quant_group: int
    group_size: int  # the kernel's group: divides quant_group
    packed: torch.Tensor
    scale_and_zeros: torch.Tensor  # [K / group_size, N, 2] in the activation dtype

    def usable_for(self, params: tuple[torch.Tensor, torch.Tensor, torch.Tensor], x: torch.Tensor) -> bool:
        if torch.compiler.is_compiling():
            current = _in_guarded_graph
        else:
            current = all(v is None or p._version == v for p, v in zip(params, self.versions))
        return (current and all(p is s for p, s in zip(params, self.sources))
                and x.device.type == "cpu" and x.dtype == self.scale_and_zeros.dtype
                and x.numel() <= INT4PACK_MAX_ROWS * x.shape[-1])

    def traced_tensors(self) -> tuple[torch.Tensor, ...]:
        """What a decode graph takes as inputs. It traces every input dim dynamic; a symbolic N from
        the pack would reach the slices of a merged q/k/v output, which Inductor cannot lower
        (parameters are static already), so the compile marks these static
        (compilation/compiled_model.py)."""
        return self.packed, self.scale_and_zeros

    def linear(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        """x [..., K] -> x·Wᵀ (+ bias) [..., N] in x's dtype."""
        rows = x.reshape(-1, x.shape[-1]).contiguous()
        y = torch._weight_int4pack_mm_for_cpu(rows, self.packed, self.group_size, self.scale_and_zeros)
        if bias is not None:
            y = y + bias
        return y.reshape(*x.shape[:-1], y.shape[-1])

    def __deepcopy__(self, memo: dict) -> Int4Pack | None:
        # memo maps the sources to the copy's own parameters: pack those, so a deep-copied model
        # keeps its fast path (a copied parameter starts at version 0, which would read stale).
        sources = [copy.deepcopy(s, memo) for s in self.sources]
        return pack_int4(*sources, self.quant_group, self.scale_and_zeros.dtype)


def cpu_vectorises_int4pack() -> bool:
    """Whether torch's CPU int4 kernel runs its vectorised bf16 path here."""
    return torch.backends.cpu.get_cpu_capability() in VECTOR_CAPABILITIES


def pack_int4(qweight: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor, group_size: int,
              dtype: torch.dtype) -> Int4Pack | None:
    """The int4pack copy of a W4A16 weight (qweight uint8 [N, K/2], scales / mins fp32 [N, K/group_size])
    for activations of `dtype`, or None where the kernel does not help: not bf16, a CPU whose torch
    kernels are not AVX2 / AVX-512 builds, another device, N not a multiple of 16, or a group no
    kernel group divides."""
    kernel_group = next((g for g in KERNEL_GROUPS if group_size % g == 0), None)
    if (dtype != torch.bfloat16 or qweight.device.type != "cpu" or not cpu_vectorises_int4pack()
            or qweight.shape[0] % ROW_BLOCK or kernel_group is None):
        return None
    with torch.no_grad():
        packed = torch._convert_weight_to_int4pack_for_cpu(unpack_nibbles(qweight).to(torch.int32), 1)
        repeat = group_size // kernel_group
        scale = scales.repeat_interleave(repeat, dim=1)
        zero = (mins + 8 * scales).repeat_interleave(repeat, dim=1)  # (q − 8)·scale + zero = q·scale + min
        scale_and_zeros = torch.stack([scale.t(), zero.t()], dim=-1).to(dtype).contiguous()
    sources = (qweight, scales, mins)
    versions = tuple(None if s.is_inference() else s._version for s in sources)
    return Int4Pack(sources, versions, group_size, kernel_group, packed, scale_and_zeros)
