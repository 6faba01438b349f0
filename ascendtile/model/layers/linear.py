"""Linear: an nn.Linear-layout projection that may be W8A8 or W4A16 and may merge several
checkpoint projections (q/k/v, gate/up) into one matmul.

Float: weight [N, K] in the model dtype, y = x·Wᵀ + b. On CPU with oneDNN, `prepack()` (run
       once after loading, by CausalLM.post_load) reorders an fp32 or bf16 weight into oneDNN's
       blocked layout (weights of at least ONEDNN_MIN_WEIGHT_ELEMENTS; smaller ones lose to
       aten): fp32 1.2–2.7× faster than aten::mm on SmolLM2's decode shapes at 2 threads on AVX2,
       about even at 1 thread except the LM head (bench/README.md); bf16 on AVX-512 BF16 1.2–1.9×
       (reference-facts, 576 → 1536). On a CPU without bf16 dot products a bf16 weight is packed
       widened to fp32 (pack_weight): from 8 rows 2.7–12× faster than aten's bf16 on SmolLM2's
       shapes (bench/results/2026-11-29-avx2-bf16-packs.md).
       The packed copy sits beside the weight (the weight stays the parameter state_dict and W8A8
       conversion read); a weight replaced or changed in place after packing is not stale-read:
       forward falls back to the plain matmul until prepack() runs again (inference-mode weights
       carry no version counter: only replacement is noticed for them).
W8A8:  weight int8 [N, K], weight_scale fp32 [N] (per output channel), input_scale fp32 [1]
       (static) or None (dynamic per-token); y = ascendtile.ops.w8a8_linear(...).
W4A16: no weight; qweight uint8 [N, K/2] (4-bit values, two per byte), scales and mins fp32
       [N, K/group_size], w = q·scale + min (ops/reference/w4a16.py); y =
       ascendtile.ops.w4a16_linear(...), exact fp32 weights and accumulation. On an AVX2 or
       AVX-512 CPU with bf16 activations, `prepack()` also packs the weight for torch's int4 kernel
       (int4pack.py: its scale and zero rounded to bf16), which small row counts (decode) take
       instead of the op, eagerly and in CPU level 2's decode graph. `dtype` of to_w4a16_shell is
       the model's, the activations' dtype.
"""
from __future__ import annotations

import contextlib
import contextvars
import copy
import dataclasses
from dataclasses import dataclass
from typing import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

import ascendtile.ops as ak
from ascendtile.huge_pages import huge_page_zeros
from ascendtile.ops.reference.w4a16 import dequantize_w4a16
from ascendtile.ops.w4a16 import check_group_size
from ascendtile.model.layers.int4pack import Int4Pack, in_guarded_graph, pack_int4
from ascendtile.platform import cpu_has_bf16_dot, cpu_vendor

# oneDNN picks its blocked layout for an expected row count; decode batches of 1 to a few dozen
# rows are the CPU hot path, and a layout chosen for 32 rows measured as fast as one for 1 row at
# 1 row and faster at 32 (the 49,152 × 576 LM head: 17 vs 22 ms).
ONEDNN_ROWS_HINT = 32

# oneDNN's linear rebuilds its primitive descriptor on every call (the primitive itself comes from
# its cache): a fixed ~25–55 µs at 1 thread, against ~5 µs for aten's matmul, which only pays off
# once the product is big enough. Measured at 32 rows, 1 thread (2026-11-23, loaded shared machine,
# two runs): aten 1.2–3× faster up to 256 × 512 weights in both, at 576 × 576 (SmolLM2's smallest)
# even in one and oneDNN 2.4× faster in the other. Smaller weights stay unpacked; every linear of
# the embedded models is above the bound.
ONEDNN_MIN_WEIGHT_ELEMENTS = 1 << 18

# fp32 products of up to this many rows run through aten on an Intel CPU (see float_linear).
ATEN_MAX_FP32_ROWS = 3

# bf16 products of at least this many rows run in fp32 on a CPU without bf16 dot products (see
# widened_linear). aten's bf16 GEMM there costs ~0.12 ns per row and weight element (AVX2 EPYC,
# 2026-11-26), fp32's ~0.03. Widening the weight in WIDEN_CHUNK_ELEMENTS chunks wins from 16 rows
# on every SmolLM2 shape, from 8 on all but the LM head (2 threads, AVX2 EPYC, 2026-11-27, ms:
# head 47.7 vs 59.3 at 16 rows, 36.8 vs 29.4 at 8; 576 -> 3072 1.29 vs 3.14 at 16, 1.09 vs 1.55 at 8;
# bench/results/2026-11-27-avx2-bf16-head.md).
BF16_AS_FP32_MIN_ROWS = 16

# bf16 products of at least this many rows run on the weight's fp32 packed copy where the CPU lacks
# bf16 dot products (pack_weight); a single row reads the bf16 weight through aten, half the bytes.
# fp32 pack against aten's bf16 (2 threads, AVX2 EPYC, 2026-11-29, ms, best of 20): 576 -> 3072 at
# 1 row 0.21 vs 0.24, 2 rows 0.23 vs 0.46, 32 rows 0.98 vs 6.73; 1536 -> 576 at 1 row 0.11 vs 0.10;
# the 49,152 x 576 head at 1 row 8.4 vs 4.6, 2 rows 9.3 vs 7.9, 8 rows 11.0 vs 29.7, 32 rows 20.5
# vs 99.5 (bench/results/2026-11-29-avx2-bf16-packs.md).
WIDE_PACK_MIN_ROWS = 2

# widened_linear converts the weight this many elements at a time (4 MiB of fp32). A whole fp32
# copy of a big weight is a fresh mapping on every call past glibc's mmap threshold (32 MiB at
# most; SmolLM2's 49,152 x 576 head is 113 MB), paid in page faults: the head at 32 rows took 140
# ms that way and 54 ms in chunks, which the allocator reuses and the last-level cache holds.
WIDEN_CHUNK_ELEMENTS = 1 << 20


@dataclass(frozen=True)
class PackedWeight:
    """A weight reordered for oneDNN, valid while `source` is the same tensor at the same version
    (version None: an inference tensor, which has no version counter). A compiled graph cannot read
    version counters: only CPU level 2's decode graph (int4pack.in_guarded_graph) takes the pack,
    the one prepack() made, as an Int4Pack there. `tiles`: the bf16 weight [N, K] also in the
    order of cpu_linear's AMX tile kernel, [N / 16, K / 32, 16, 16, 2] (with_tiles), or None."""
    source: torch.Tensor
    version: int | None
    packed: torch.Tensor
    tiles: torch.Tensor | None = None

    def usable_for(self, weight: torch.Tensor, x: torch.Tensor) -> bool:
        if torch.compiler.is_compiling():
            current = in_guarded_graph()
        else:
            current = self.version is None or weight._version == self.version
        return current and weight is self.source and x.device.type == "cpu"

    def with_tiles(self) -> PackedWeight:
        """This pack with the weight in tile order added (tiles): what CPU level 2's decode graph
        multiplies bf16 batches on, on an AMX CPU (compilation/compiled_model.py). Block j of 16
        outputs holds, per 32 inputs, 16 rows of pairs: tiles[j, c, p, i] = weight[16 j + i,
        32 c + 2 p : 32 c + 2 p + 2], the layout of AMX's right operand. On huge pages, as the
        weights are (huge_pages.py): the kernel streams them. Unchanged where the weight is not
        bf16 or not of whole 16 x 32 tiles."""
        n, k = self.source.shape
        if self.source.dtype != torch.bfloat16 or n % 16 or k % 32:
            return self
        tiles = huge_page_zeros((n // 16, k // 32, 16, 16, 2), torch.bfloat16, self.source.device)
        tiles.copy_(self.source.detach().view(n // 16, 16, k // 32, 16, 2).permute(0, 2, 3, 1, 4))
        return dataclasses.replace(self, tiles=tiles)

    def traced_tensors(self) -> tuple[torch.Tensor, ...]:
        """What CPU level 2's decode graph takes as inputs (onednn_linear, cpu_linear): it traces
        every input dim dynamic, and sizes of the pack's own would add symbols per linear and
        double that graph's compile, so the compile marks these static
        (compilation/compiled_model.py)."""
        return (self.packed,) if self.tiles is None else (self.packed, self.tiles)

    def __deepcopy__(self, memo: dict) -> PackedWeight | None:
        # oneDNN's opaque tensor has no storage to copy: pack the copied weight (memo makes it the
        # copy's own parameter) so a deep-copied model keeps its fast path, tiles included.
        packed = pack_weight(copy.deepcopy(self.source, memo))
        return packed.with_tiles() if packed is not None and self.tiles is not None else packed


def pack_weight(weight: torch.Tensor) -> PackedWeight | None:
    """The oneDNN-packed copy of a CPU weight [N, K], fp32 or bf16, or None where oneDNN cannot
    help: another dtype or device, fewer than ONEDNN_MIN_WEIGHT_ELEMENTS elements, torch built
    without oneDNN, or a CPU/build whose oneDNN refuses the reorder. A bf16 weight is packed as bf16
    where the CPU has bf16 dot products (cpu_has_bf16_dot), else widened to fp32 (exact: every bf16
    value is an fp32 one), which onednn_linear multiplies at fp32 GEMM speed: aten's bf16 GEMM there
    is ~4x slower than fp32, and widening on every call (widened_linear) costs a pass over the
    weight. The price is memory: the fp32 copy is twice the bf16 weight's bytes, so a bf16 model
    then holds 3 bytes a weight where an fp32 one holds 8 (its weight and its fp32 pack)."""
    if (weight.device.type != "cpu" or weight.dtype not in (torch.float32, torch.bfloat16)
            or weight.numel() < ONEDNN_MIN_WEIGHT_ELEMENTS or not torch.backends.mkldnn.is_available()):
        return None
    source = weight.detach() if weight.dtype == torch.float32 or cpu_has_bf16_dot() else weight.detach().float()
    try:
        packed = torch.ops.mkldnn._reorder_linear_weight(source, ONEDNN_ROWS_HINT)
    except (RuntimeError, AttributeError):  # op missing from this build, or the ISA check refused it
        return None
    return PackedWeight(weight, None if weight.is_inference() else weight._version, packed)


def few_rows_take_aten(x: torch.Tensor) -> bool:
    """Whether x, fp32 of at most ATEN_MAX_FP32_ROWS rows, runs through aten's matmul rather than
    a packed weight: only on an Intel CPU. Such a product reads the weight once either way, and
    aten's (MKL's) skips oneDNN's per-call primitive set-up (~25 µs). SmolLM2's 121 linears, aten
    vs packed, 2 threads: on an Intel Xeon (avx512_bf16) 1 row 15.4 vs 18.5 ms, 2 rows 17.2 vs
    20.1, 3 rows 18.8 vs 21.9, 4 rows 27.2 vs 21.6 (2026-11-25, best of 10;
    bench/results/2026-11-25-single-stream.md); on an AMD EPYC (avx2), where MKL's small-row
    kernels read the weights at a fraction of the memory's speed, 1 row 73 vs 57 ms, 2 rows 131
    vs 51-74, 3 rows 144-161 vs 49-55 (2026-11-27; bench/results/2026-11-27-amd-fp32-rows.md)."""
    return (x.dtype == torch.float32 and x.numel() <= ATEN_MAX_FP32_ROWS * x.shape[-1]
            and cpu_vendor() == "GenuineIntel")


# The op eager float products call within few_rows_kernel (None outside it).
_few_rows_op: contextvars.ContextVar[Callable | None] = contextvars.ContextVar("few_rows_op", default=None)


@contextlib.contextmanager
def few_rows_kernel(op: Callable) -> Iterator[None]:
    """Within it, eager float products (float_linear) call op(x, weight, packed copy or None, bias,
    tiles or None), an op of `torch.ops.ascendtile.cpu_linear`'s signature, instead of choosing
    themselves. A caller that knows the op serves its products sets it: compilation/compiled_model.py
    around the LM head of a few rows, where the op's C++ kernel reads the weight once at close to
    the memory's speed."""
    token = _few_rows_op.set(op)
    try:
        yield
    finally:
        _few_rows_op.reset(token)


def float_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                 packed: PackedWeight | None) -> torch.Tensor:
    """x·weightᵀ + bias, through the packed copy when it is still the weight's (onednn_linear's
    choice: except for the few fp32 rows that few_rows_take_aten sends to aten). bf16 stays
    packed: faster than aten at one row too. Not while Dynamo traces the general graph: the
    version check would be a data-dependent guard. That graph gets its weights packed by
    Inductor's freezing instead at CPU level 2 (compilation/freeze.py); CPU level 2's decode graph
    takes the pack itself (PackedWeight.usable_for); level 3's pieces are not frozen, so their
    linears run unpacked.

    bf16 on a CPU without bf16 dot products (AVX2): a packed weight is an fp32 copy, which
    onednn_linear multiplies from WIDE_PACK_MIN_ROWS rows; an unpacked one (too small to pack, or no
    oneDNN) is widened per call from BF16_AS_FP32_MIN_ROWS rows (widened_linear). Fewer rows read
    the weight in bf16: half the bytes. The frozen general graph widens its bf16 weights once, as
    constants (compilation/freeze.py).

    CPU level 2's decode graph (int4pack.in_guarded_graph) calls the packed copy through
    onednn_linear: that graph is not frozen, and Inductor lowers F.linear to aten's matmul. A pack
    with tiles (PackedWeight.with_tiles) traces as cpu_linear over them instead.
    Within few_rows_kernel, an eager product calls that context's op."""
    current = packed is not None and packed.usable_for(weight, x)
    few_rows_op = None if torch.compiler.is_compiling() else _few_rows_op.get()  # Dynamo cannot trace get()
    if few_rows_op is not None:
        return few_rows_op(x, weight, packed.packed if current else None, bias, packed.tiles if current else None)
    if current:
        if torch.compiler.is_compiling():
            if packed.tiles is not None:
                return torch.ops.ascendtile.cpu_linear.default(x, weight, packed.packed, bias, packed.tiles)
            return torch.ops.ascendtile.onednn_linear.default(x, weight, packed.packed, bias)
        return onednn_linear(x, weight, packed.packed, bias)
    if (x.dtype == torch.bfloat16 and x.device.type == "cpu" and not torch.compiler.is_compiling()
            and x.numel() >= BF16_AS_FP32_MIN_ROWS * x.shape[-1] and not cpu_has_bf16_dot()):
        return widened_linear(x, weight, bias)
    return F.linear(x, weight, bias)


_LIB = torch.library.Library("ascendtile", "FRAGMENT")  # the namespace's DEF: expert_dispatch.py
_LIB.define("onednn_linear(Tensor x, Tensor weight, Tensor packed, Tensor? bias) -> Tensor")


def onednn_linear(x: torch.Tensor, weight: torch.Tensor, packed: torch.Tensor,
                  bias: torch.Tensor | None) -> torch.Tensor:
    """`torch.ops.ascendtile.onednn_linear`: x [..., K] · weight [N, K]ᵀ (+ bias [N]) -> [..., N],
    fp32 or bf16, through `packed`, weight's oneDNN-packed copy (PackedWeight.packed), or through
    aten where few_rows_take_aten says so. A bf16 weight's fp32 copy (pack_weight, on a CPU without
    bf16 dot products) multiplies x widened to fp32 and rounds the product to bf16 once, as aten's
    bf16 GEMM does after its fp32 accumulation; fewer than WIDE_PACK_MIN_ROWS rows read the bf16
    weight through aten instead. float_linear's product
    as one op opaque to torch.compile, so that a graph that is not frozen gets the packed weights
    too. Inductor cannot lower `mkldnn._linear_pointwise` over a packed weight that is a graph
    input, and its own F.linear becomes aten's matmul, whose small-row kernels (MKL's) read the
    weights at a fraction of the memory's speed on AMD CPUs (few_rows_take_aten). Internal to the
    model layers, not part of the `ascend` op contract (no kernel), hence the `ascendtile`
    namespace (as expert_dispatch.routed_experts). Registered with torch.library.Library rather
    than torch.library.custom_op, whose Python wrapper cost ~40 µs a call (121 calls a SmolLM2
    step). Like an Int4Pack in that graph, it reads the copy prepack() made, unchecked: a weight
    changed in place afterwards needs prepack() again."""
    if few_rows_take_aten(x):
        return F.linear(x, weight, bias)
    if packed.dtype == x.dtype:
        return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")
    if x.numel() < WIDE_PACK_MIN_ROWS * x.shape[-1]:
        return F.linear(x, weight, bias)
    wide_bias = None if bias is None else bias.float()
    return torch.ops.mkldnn._linear_pointwise(x.float(), packed, wide_bias, "none", [], "").to(x.dtype)


def _onednn_linear_fake(x: torch.Tensor, weight: torch.Tensor, packed: torch.Tensor,
                        bias: torch.Tensor | None) -> torch.Tensor:
    return x.new_empty(*x.shape[:-1], weight.shape[0])


# CompositeExplicitAutograd: the packed tensor's MkldnnCPU key would miss a CPU-only kernel.
_LIB.impl("onednn_linear", onednn_linear, "CompositeExplicitAutograd")
torch.library.register_fake("ascendtile::onednn_linear", _onednn_linear_fake, lib=_LIB)


def widened_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """bf16 x [..., K] · weight [N, K]ᵀ (+ bias [N]) on fp32 copies of the operands (exact), rounded
    to bf16 once, as aten's bf16 GEMM does after its fp32 accumulation, at fp32 GEMM speed (a
    704-token SmolLM2 prefill: 10.5 s through aten's bf16, 2.0 s this way, 1.8 s in fp32;
    bench/results/2026-11-26-avx2-bf16-prefill.md). The weight is widened WIDEN_CHUNK_ELEMENTS at a
    time into column blocks of one fp32 output; each output element is the same dot product as
    over a whole fp32 copy, so the result is bit-identical to it."""
    rows = x.reshape(-1, x.shape[-1]).float()
    n = weight.shape[0]
    out = torch.empty(rows.shape[0], n, dtype=torch.float32, device=x.device)
    step = max(1, WIDEN_CHUNK_ELEMENTS // weight.shape[1])
    for start in range(0, n, step):
        block, chunk = out[:, start:start + step], weight[start:start + step].float().t()
        if bias is None:
            torch.mm(rows, chunk, out=block)
        else:
            torch.addmm(bias[start:start + step].float(), rows, chunk, out=block)
    return out.to(torch.bfloat16).reshape(*x.shape[:-1], n)


class Linear(nn.Module):
    def __init__(self, in_features: int, out_features: int | list[int], bias: bool = False,
                 shard_names: list[str] | None = None) -> None:
        """out_features as a list with shard_names merges checkpoint tensors `<shard>.weight` etc.
        stacked along the output dim (e.g. [q, k, v] sizes with ["q_proj", "k_proj", "v_proj"])."""
        super().__init__()
        sizes = out_features if isinstance(out_features, list) else [out_features]
        self.in_features, self.out_features = in_features, sum(sizes)
        self.shard_names = shard_names or []
        self.shard_sizes = sizes
        self.weight = nn.Parameter(torch.empty(self.out_features, in_features), requires_grad=False)
        self.bias = nn.Parameter(torch.empty(self.out_features), requires_grad=False) if bias else None
        self.register_parameter("weight_scale", None)  # set by to_w8a8_shell
        self.register_parameter("input_scale", None)
        for name in ("qweight", "scales", "mins"):  # set by to_w4a16_shell
            self.register_parameter(name, None)
        self.group_size = 0
        self.activation_dtype: torch.dtype | None = None
        self.packed: PackedWeight | Int4Pack | None = None

    @property
    def kind(self) -> str:
        """The weight format: "float", "w8a8" or "w4a16"."""
        if self.qweight is not None:
            return "w4a16"
        return "w8a8" if self.weight.dtype == torch.int8 else "float"

    @property
    def quantized(self) -> bool:
        return self.kind != "float"

    def shard_offsets(self) -> dict[str, tuple[int, int]]:
        """shard name -> (row offset, rows) in the merged weight."""
        offsets, start = {}, 0
        for name, size in zip(self.shard_names, self.shard_sizes):
            offsets[name] = (start, size)
            start += size
        return offsets

    def to_w8a8_shell(self, static: bool) -> None:
        """Replace the float weight by uninitialised int8 weight + scales (filled by a loader)."""
        device = self.weight.device
        self.packed = None
        self.weight = nn.Parameter(torch.empty(self.out_features, self.in_features, dtype=torch.int8, device=device),
                                   requires_grad=False)
        self.weight_scale = nn.Parameter(torch.empty(self.out_features, dtype=torch.float32, device=device),
                                          requires_grad=False)
        self.input_scale = nn.Parameter(torch.zeros(1, dtype=torch.float32, device=device), requires_grad=False) if static else None

    def to_w4a16_shell(self, group_size: int, dtype: torch.dtype) -> None:
        """Replace the float weight by uninitialised W4A16 qweight, scales and mins (filled by a
        loader) in groups of `group_size` inputs (a multiple of 32 dividing in_features, as
        ascendtile.ops.w4a16_linear takes); `dtype`: the model's, which the activations arrive in."""
        check_group_size(group_size, self.in_features, "the Linear")
        device = self.weight.device if self.weight is not None else self.qweight.device
        n, groups = self.out_features, self.in_features // group_size
        self.packed = None
        self.weight = self.weight_scale = self.input_scale = None
        self.qweight = nn.Parameter(torch.empty(n, self.in_features // 2, dtype=torch.uint8, device=device),
                                    requires_grad=False)
        self.scales = nn.Parameter(torch.empty(n, groups, device=device), requires_grad=False)
        self.mins = nn.Parameter(torch.empty(n, groups, device=device), requires_grad=False)
        self.group_size, self.activation_dtype = group_size, dtype

    def dequantized_weight(self, dtype: torch.dtype) -> torch.Tensor:
        if self.kind == "w4a16":
            return dequantize_w4a16(self.qweight, self.scales, self.mins, self.group_size).to(dtype)
        if self.kind == "w8a8":
            return (self.weight.float() * self.weight_scale[:, None]).to(dtype)
        return self.weight.to(dtype)

    def prepack(self) -> None:
        """Pack the float weight for oneDNN where that helps (see pack_weight), a W4A16 one for
        torch's int4 kernel where that helps (int4pack.pack_int4); W8A8: nothing."""
        if self.kind == "w4a16":
            self.packed = pack_int4(self.qweight, self.scales, self.mins, self.group_size, self.activation_dtype)
        else:
            self.packed = None if self.quantized else pack_weight(self.weight)

    def project(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        """x·Wᵀ (+ bias): the matmul alone, which a row-parallel subclass reduces before its bias."""
        kind = self.kind
        if kind == "w4a16":
            params = (self.qweight, self.scales, self.mins)
            if self.packed is not None and self.packed.usable_for(params, x):
                return self.packed.linear(x, bias)
            return ak.w4a16_linear(x, *params, self.group_size, bias)
        if kind == "w8a8":
            return ak.w8a8_linear(x, self.weight, self.weight_scale, self.input_scale, bias)
        return float_linear(x, self.weight, bias, self.packed)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.project(x, self.bias)

    def extra_repr(self) -> str:
        kind = self.kind
        if kind == "w8a8":
            kind += "-" + ("static" if self.input_scale is not None else "dynamic")
        elif kind == "w4a16":
            kind += f", group_size={self.group_size}"
        if self.packed is not None:
            kind += ", int4pack" if kind.startswith("w4a16") else ", onednn-packed"
        return f"in={self.in_features}, out={self.shard_sizes}, bias={self.bias is not None}, {kind}"
