"""Per-bucket device-graph capture of one level-3 piece (vLLM's piecewise CUDA graphs).

A call with T tokens copies its token rows into static input buffers, pads to the smallest
capture size B >= T and replays the graph captured for B (capturing it on the first such call);
calls with more tokens than the largest size run the piece uncaptured. The outputs' first T rows
are returned, views of the graph's static outputs, valid until the piece's next call; token
inputs the piece writes in place get their rows copied back.

Which pieces can be captured is `PieceSignature`'s answer; the token-independent tensors a
graph reads at their capture-time address, and one that moved raises instead of replaying stale
memory. Padding rows keep what earlier calls left there (zeros at first): every piece
computes row by row, so they never reach the first T rows, and being earlier real inputs they are
valid indices and finite values.

The graph type is injected (the `DeviceGraph` protocol): `TorchDeviceGraphs` for
torch.cuda.CUDAGraph / torch.npu.NPUGraph, or a test's own class on CPU."""
from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Callable, Protocol

import torch

from ascendtile import platform
from ascendtile.compilation.config import CompilationConfig, CompilationLevel
from ascendtile.compilation.piece_signature import PieceSignature


class DeviceGraph(Protocol):
    def capture(self, fn: Callable[[], tuple]) -> tuple:
        """Record the device work of fn() and return its outputs (the graph's static outputs)."""

    def replay(self) -> None:
        """Rerun the recorded work on the same buffers."""


class TorchDeviceGraphs:
    """A DeviceGraph factory over torch.cuda.CUDAGraph / torch.npu.NPUGraph (platform picks the
    class); the graphs it makes share one memory pool, as they replay one after another."""

    def __init__(self, device_type: str) -> None:
        self.backend = getattr(torch, device_type)  # torch.cuda, or torch.npu from torch_npu
        self.graph_type = platform.device_graph_type(device_type)
        if self.graph_type is None:
            raise ValueError(f"device_type: {device_type!r} has no device graphs")
        self.pool = None

    def __call__(self) -> DeviceGraph:
        return _TorchDeviceGraph(self)


class _TorchDeviceGraph:
    def __init__(self, owner: TorchDeviceGraphs) -> None:
        self.owner, self.graph = owner, owner.graph_type()

    def capture(self, fn: Callable[[], tuple]) -> tuple:
        self.owner.backend.synchronize()
        with self.owner.backend.graph(self.graph, pool=self.owner.pool):
            outputs = fn()
        self.owner.pool = self.graph.pool()
        return outputs

    def replay(self) -> None:
        self.graph.replay()


@dataclass(frozen=True)
class CaptureSpec:
    """new_graph: makes one DeviceGraph per (piece, size). sizes: the capture sizes, ascending."""

    new_graph: Callable[[], DeviceGraph]
    sizes: tuple[int, ...]


def piece_capture(config: CompilationConfig, device_type: str, max_num_seqs: int) -> CaptureSpec | None:
    """Level 3 on a device with graphs (NPU/CUDA): its pieces captured at
    config.capture_sizes_for(max_num_seqs); else None (nothing captured)."""
    if config.level != CompilationLevel.PIECEWISE or platform.device_graph_type(device_type) is None:
        return None
    return CaptureSpec(TorchDeviceGraphs(device_type), config.capture_sizes_for(max_num_seqs))


class CapturedPiece:
    """Runs one compiled piece `fn` through per-bucket device graphs (see the module docstring).
    graphs: capture size -> (graph, its static outputs); buffers: input position -> the static
    rows of that token input, shared by every size."""

    def __init__(self, name: str, fn: Callable, signature: PieceSignature, spec: CaptureSpec) -> None:
        self.name, self.fn, self.signature, self.spec = name, fn, signature, spec
        self.graphs: dict[int, tuple[DeviceGraph, tuple]] = {}
        self.buffers: dict[int, torch.Tensor] = {}
        self.fixed_addresses: list[int] | None = None

    def __call__(self, *args: object) -> tuple:
        """args: the piece's inputs (token tensors [T, ...] first dim T). Returns its outputs,
        token outputs [T, ...]."""
        sig, sizes = self.signature, self.spec.sizes
        num_tokens = args[sig.token[0]].shape[0]
        if num_tokens > sizes[-1]:
            return self.fn(*args)
        size = sizes[bisect.bisect_left(sizes, num_tokens)]
        self._check_fixed(args)
        if size not in self.graphs:
            self._capture(size, args)
        # after a capture too: the warm-up (and a capture that runs) wrote the written inputs' rows
        self._fill(args, num_tokens)
        graph, outputs = self.graphs[size]
        graph.replay()
        for i in sig.written:
            args[i].copy_(self.buffers[i][:num_tokens])
        return tuple(out[:num_tokens] if sliced else out for out, sliced in zip(outputs, sig.sliced))

    def _fill(self, args: tuple, num_tokens: int) -> None:
        """Copy the token inputs' rows into the static buffers (allocated on the first call)."""
        for i in self.signature.token:
            if i not in self.buffers:
                shape = (self.spec.sizes[-1], *args[i].shape[1:])
                self.buffers[i] = torch.zeros(shape, dtype=args[i].dtype, device=args[i].device)
            self.buffers[i][:num_tokens].copy_(args[i])

    def _check_fixed(self, args: tuple) -> None:
        addresses = [args[i].data_ptr() if isinstance(args[i], torch.Tensor) else args[i] for i in self.signature.fixed]
        if self.fixed_addresses is None:
            self.fixed_addresses = addresses
        elif addresses != self.fixed_addresses:
            moved = [i for i, a, b in zip(self.signature.fixed, addresses, self.fixed_addresses) if a != b]
            raise RuntimeError(f"{self.name}: token-independent input(s) at {moved} changed since capture; "
                               f"the captured graphs would read the old memory")

    def _capture(self, size: int, args: tuple) -> None:
        """Warm up at `size` (first-call work such as kernel compiles stays outside the graph),
        then capture."""
        sig = self.signature
        self._fill(args, args[sig.token[0]].shape[0])
        padded = list(args)
        for i in sig.token:
            padded[i] = self.buffers[i][:size]
        for i, expr in sig.ints.items():
            padded[i] = int(expr.subs(sig.symbol, size))
        self.fn(*padded)
        graph = self.spec.new_graph()
        self.graphs[size] = (graph, tuple(graph.capture(lambda: self.fn(*padded))))
