"""CompiledModel: a RuntimeModel whose forward runs compiled at the config's level; every other
attribute (allocate_kv_cache, ...) is the wrapped model's, and so is compute_logits, except that
with CPU level 2's decode graph a head product of few rows runs in the decode graph's C++ linear
kernel (compute_logits below).

Level 1 is torch.compile with Dynamo's defaults: its guards run every call, a changed size or
metadata int first seen static recompiles, and (fullgraph off, as by default) past Dynamo's
recompile limit a call runs eagerly instead of failing. Level 2 traces once with every input dim
and int dynamic (backed_size_oblivious: a size of 1 in the first call is not specialized either), and
after that first compile skips guard evaluation, so every step runs the one graph with no
per-call guard cost. That is sound because the trace depends on no input value: the metadata
ints reach only the attention ops (`SymInt` in their schemas) and nothing branches on a size.
Level 3 traces exactly as level 2; its backend splits the graph at the attention ops
(backend.py, piecewise.py) and, given a CaptureSpec, captures the pieces per size.

On CPU with cpu_decode_graph set, level 2 gives decode steps (every sequence one new token) a
graph of their own, in which rope, the KV write and attention take their traceable forms
(decompose.py): a decode step then runs no `ascend` op and Inductor compiles all of it but the
linears whose weights are packed for oneDNN (layers/linear.py: onednn_linear). Unlike the
general graph it has guards that matter: Inductor's lowering of the gathers and of rope's strided
writes guards on the batch being 1 or more, so a batch of one gets a compile of its own. Its
caches are traced with static shapes, which makes the layers' kernels one set instead of one per
layer's cache symbols; caches of another shape fail its guards and retrace it. W4A16 linears take
torch's int4 kernel there (model/layers/int4pack.py) up to its row bound, which is a guard too, as
eager decode does; the general graph runs their exact op. Those three are the variants its entries
differ in: the first step of each variant goes through Dynamo with its guards evaluated, and the
variant's later steps call the bytecode of the entry that served it, with no guard evaluation
(direct_call.py; `decode_calls` counts both kinds).

On a CPU with AMX, a bf16 model's oneDNN packs also get their weights in tile order
(PackedWeight.with_tiles, on huge pages), and the decode graph traces its linears as cpu_linear calls
over them: the op's tile kernel multiplies products of 3 to 64 rows on AMX, streaming the tiles at
close to the memory's speed (SmolLM2's 120 layer products at 32 bf16 rows, one process: 11.7
against 12.9 ms for Inductor's CPP GEMM template over frozen weights on huge pages, the 49,152 ×
576 head 2.4 against 3.2; a bf16 decode step at batch 32, 37.4 against 45.2 ms;
bench/results/2026-11-30-amx-tile-linear.md). The tiles hold the weights' bytes once more; the
frozen template's copies did too, and took a longer compile (Inductor times each product shape's
kernels). fp32 models keep their weights as inputs: through the template their decode steps at
batch 32 took 88.7-97.9 against oneDNN's 71.8-83.9 ms
(bench/results/2026-11-29-amx-prefill-attention.md), and on an x86 CPU with AVX2 or AVX-512
cpu_linear's wide kernel takes their products of 4 to 64 rows.
"""
from __future__ import annotations

import contextlib
import types
from typing import Callable, Iterator

import torch
from torch import nn

from ascendtile.compilation.backend import AscendBackend
from ascendtile.compilation.config import CompilationConfig, CompilationLevel
from ascendtile.compilation.direct_call import capturing_bytecode
from ascendtile.compilation.piece_capture import CaptureSpec
from ascendtile.cpu import linear as cpu_linear
from ascendtile.model.attention_metadata import AttentionMetadata
from ascendtile.model.layers import int4pack
from ascendtile.model.layers.linear import Linear, PackedWeight, few_rows_kernel
from ascendtile.ops._registry import trusted_calls


class CompiledModel:
    def __init__(self, model: nn.Module, config: CompilationConfig, capture: CaptureSpec | None = None) -> None:
        self.model, self.config = model, config
        device_type = next(model.parameters()).device.type
        self.backend = AscendBackend(config, device_type, capture)
        once = config.level >= CompilationLevel.DYNAMO_ONCE
        self._forward = torch.compile(_own_code(model.forward), backend=self.backend, fullgraph=once,
                                      dynamic=True if once else None)
        self.decode_backend = (AscendBackend(config, device_type, decode=True)
                               if device_type == "cpu" and config.level == CompilationLevel.DYNAMO_ONCE
                               and config.cpu_decode_graph else None)
        # bf16 weights on an AMX CPU: the decode graph multiplies them on their tiles
        if (self.decode_backend is not None and cpu_linear.tiles_served() and _float_bf16_linears(model)
                and cpu_linear.load(config.cache_dir, [torch.bfloat16])):
            _add_tiles(model)
        self._decode_method = _own_code(model.forward)
        self._decode_forward: Callable | None = None
        self._attention_layers: list[nn.Module] | None = None
        # The decode graph's compiled bytecode per variant (a batch of one, a batch within W4A16
        # packs' row bound, the caches' shapes): what its entries' guards tell apart (_run_decode).
        self._decode_direct: dict[tuple[bool, bool, tuple[torch.Size, ...]], Callable] = {}
        self._decode_codes: list[Callable] = []  # every compile's, in order
        # decode steps that went through Dynamo (guards evaluated) / straight to a captured entry
        self.decode_calls = {"guarded": 0, "direct": 0}
        self._head_in_kernel: bool | None = None  # decided at the first compute_logits (_few_rows_head)

    def __call__(self, input_ids: torch.Tensor, positions: torch.Tensor, attn_metadata: AttentionMetadata) -> torch.Tensor:
        # A validated step's ops skip their validators inside the graph too (the eager model skips
        # them through unchecked(); a graph calls the registered ops).
        with trusted_calls() if attn_metadata.validated else contextlib.nullcontext():
            return self._run(input_ids, positions, attn_metadata)

    def _run(self, input_ids: torch.Tensor, positions: torch.Tensor, attn_metadata: AttentionMetadata) -> torch.Tensor:
        if self.config.level == CompilationLevel.DYNAMO_AS_IS:
            return self._forward(input_ids, positions, attn_metadata)
        if (self.decode_backend is not None and attn_metadata.validated and attn_metadata.max_seqlen_q == 1
                and input_ids.shape[0] == attn_metadata.num_seqs):
            return self._run_decode(input_ids, positions, attn_metadata)
        with _tracing_config():
            if not self.backend.num_compiles:
                return self._forward(input_ids, positions, attn_metadata)
            with torch.compiler.set_stance(skip_guard_eval_unsafe=True):
                return self._forward(input_ids, positions, attn_metadata)

    def _run_decode(self, input_ids: torch.Tensor, positions: torch.Tensor,
                    attn_metadata: AttentionMetadata) -> torch.Tensor:
        # A batch of one and caches of another shape retrace the decode graph (Inductor's lowering
        # of the gathers guards on the batch size being 1 or more; the caches are static), and so
        # do W4A16 linears' packs past their row bound (int4pack.INT4PACK_MAX_ROWS); nothing else
        # does. So the first call of such a variant goes through Dynamo, its guards
        # evaluated, and later calls of the variant run the bytecode of the entry that served it
        # (direct_call.py): the one that call compiled, or the only one there is. (A first call that
        # compiled nothing while several entries exist, which only happens without Inductor, leaves
        # its variant going through Dynamo: correct, just not faster.) Dynamo's call
        # path, guards included, cost ~0.9 ms of a bf16 SmolLM2 step at batch 1
        # (bench/results/2026-11-27-direct-decode.md).
        if self._attention_layers is None:
            self._attention_layers = self.model.attention_layers()
        # The caches are read every step: an allocate_kv_cache on the model replaces them.
        # mark_static marks nothing on a 0-dim tensor.
        caches = [t for attn in self._attention_layers for t in attn.__dict__.values()
                  if type(t) is torch.Tensor and t.dim()]
        batch = input_ids.shape[0]
        variant = (batch == 1, batch <= int4pack.INT4PACK_MAX_ROWS, tuple(cache.shape for cache in caches))
        direct = self._decode_direct.get(variant)
        if direct is not None:
            self.decode_calls["direct"] += 1
            return direct(self.model, input_ids, positions, attn_metadata)
        self.decode_calls["guarded"] += 1
        if self._decode_forward is None:
            self._decode_forward = torch.compile(self._decode_method, backend=self.decode_backend,
                                                 fullgraph=True, dynamic=True)
        # Its caches are static while it traces: the marks live on the tensors, and the general
        # graph must keep the caches' sizes symbolic. The prepacked weights' copies it takes are
        # static for good (traced_tensors), marked here, not as they are packed, so that a process
        # that never compiles does not import Dynamo.
        for pack in _prepacked_tensors(self.model):
            torch._dynamo.mark_static(pack)
        for cache in caches:
            torch._dynamo.mark_static(cache)
        try:
            with _tracing_config(), int4pack.guarded_graph(), \
                    capturing_bytecode(self._decode_method.__func__) as compiled:
                out = self._decode_forward(input_ids, positions, attn_metadata)
            self._decode_codes += compiled
            if compiled or len(self._decode_codes) == 1:
                self._decode_direct[variant] = self._decode_codes[-1]
            return out
        finally:
            for cache in caches:
                del cache._dynamo_static_indices, cache._has_dynamo_dim_marking

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The wrapped model's logits. With CPU level 2's decode graph, a head product of the rows
        cpu_linear's C++ kernel takes (rows_served: single stream and two sequences; fp32 decode
        batches on an x86 CPU with AVX2 or AVX-512; bf16 ones over the head's tiles on an AMX CPU) runs there, as
        the decode graph's linears do: it reads the head's weight once at close to the memory's
        speed, where oneDNN's packed copy or aten read it slower (SmolLM2's 49,152 × 576 head, 2
        threads, AVX2 EPYC, 2026-11-29: fp32 1 row 8.2–8.7 against 10.2 ms, bf16 1 row 3.8–3.9
        against 6.0–6.3, 2 rows 2.6–3.5 against 8.2–10.3; bench/results/2026-11-29-few-rows-head.md)."""
        if hidden.shape[0] <= cpu_linear.rows_served(hidden.dtype) and self._few_rows_head():
            with few_rows_kernel(torch.ops.ascendtile.cpu_linear.default):
                return self.model.compute_logits(hidden)
        return self.model.compute_logits(hidden)

    def _few_rows_head(self) -> bool:
        """Whether the head's products of few rows run in cpu_linear's kernel: with the decode graph,
        whose linears build the kernel, for a float head weight it serves."""
        if self._head_in_kernel is None:
            weight = self.model.head_weight
            self._head_in_kernel = (self.decode_backend is not None and weight is not None
                                    and cpu_linear.supports(weight)
                                    and cpu_linear.load(self.config.cache_dir, [weight.dtype]))
        return self._head_in_kernel

    def __getattr__(self, name: str):
        return getattr(self.model, name)

    @property
    def compile_seconds(self) -> float:
        """Seconds spent compiling, both graphs."""
        decode = self.decode_backend
        return sum(self.backend.compile_seconds) + (sum(decode.compile_seconds) if decode is not None else 0.0)

    def describe(self) -> str:
        """One line: level, compiles, seconds spent compiling (level 3: and the pieces compiled;
        CPU level 2: and the decode graph's compiles)."""
        pieces = sum(len(split.pieces) for split in self.backend.splits)
        decode = self.decode_backend
        return (f"compilation level {int(self.config.level)} ({self.config.level.name}): "
                f"{self.backend.num_compiles} compile(s){f' ({pieces} pieces)' if pieces else ''}"
                f"{f' + {decode.num_compiles} of the decode graph' if decode is not None else ''}, "
                f"{self.compile_seconds:.1f} s")


def _float_bf16_linears(model: nn.Module) -> bool:
    """Whether every Linear of the model has a float bf16 weight (none W8A8 or W4A16)."""
    linears = [module for module in model.modules() if isinstance(module, Linear)]
    return bool(linears) and all(linear.kind == "float" and linear.weight.dtype == torch.bfloat16 for linear in linears)


def _add_tiles(model: nn.Module) -> None:
    """Every oneDNN pack of the model (its Linears', the tied head's) with the weight in tile order
    added (PackedWeight.with_tiles)."""
    for module in model.modules():
        for name, value in list(vars(module).items()):
            if isinstance(value, PackedWeight):
                setattr(module, name, value.with_tiles())


def _prepacked_tensors(model: nn.Module) -> list[torch.Tensor]:
    """The tensors of every prepacked weight copy the model holds (oneDNN's, int4pack's)."""
    return [tensor for module in model.modules() for value in vars(module).values()
            if isinstance(value, (PackedWeight, int4pack.Int4Pack)) for tensor in value.traced_tensors()]


@contextlib.contextmanager
def _tracing_config() -> Iterator[None]:
    """The config Dynamo traces under at levels 2 and 3. Floats (eps, softmax scale) stay
    constants: symbolic ones make Inductor restart the trace. No duck shaping: a block-table width
    that happens to equal a constant model dim (KV heads) would share its symbol and be specialized
    with it."""
    # Imported here: Dynamo was 1.6 s of `ascendtile generate`'s imports (2-core AVX2 EPYC,
    # 2026-11-28), which a process that never compiles (level 0, the default) does not pay.
    import torch._dynamo.config as dynamo_config
    import torch.fx.experimental._config as fx_config

    with fx_config.patch(backed_size_oblivious=True, use_duck_shape=False), \
            dynamo_config.patch(specialize_float=True):
        yield


def _own_code(method: types.MethodType) -> types.MethodType:
    """The bound method over a private copy of its code object. Dynamo keeps its compiled entries
    (and their recompile limit) per code object: every model of a class would otherwise share one
    cache, so a process that builds several LLMs would pile entries onto it, keep old models'
    graphs alive and, past the limit, fail level 2's fullgraph compile."""
    fn = method.__func__
    copy = types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    return types.MethodType(copy, method.__self__)


def compile_model(model: nn.Module, config: CompilationConfig,
                  capture: CaptureSpec | None = None) -> nn.Module | CompiledModel:
    """The model itself at level 0, else a CompiledModel. capture: level 3's per-size capture of
    the pieces (ignored below level 3)."""
    if config.level == CompilationLevel.NO_COMPILATION:
        return model
    return CompiledModel(model, config, capture if config.level == CompilationLevel.PIECEWISE else None)
