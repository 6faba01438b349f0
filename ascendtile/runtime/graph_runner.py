"""GraphRunner: decode steps on static input buffers, bucketed by padded batch size.

A decode batch of b sequences runs as the smallest bucket B >= b (1, 2, 4, 8, 16, 24, ... up to
max_num_seqs); rows b..B-1 are padding: slot -1 (KV not written) and seqused_k 0 (attention
outputs 0 for them). On NPU (torch.npu.NPUGraph) and CUDA (torch.cuda.CUDAGraph) each bucket is
captured once and replayed; the captured attention sees max_seqlen_k = max_model_len and the
full-width block table, since host ints are frozen into the graph. With capture=False (CPU
tests) the same buffers, bucketing and padding run eagerly (with the batch's real max_seqlen_k
and block-table width, which an eager call may use), so that logic is tested without a device;
the Engine builds a GraphRunner only on NPU/CUDA, where there is something to capture. Batches larger than
the largest bucket run eagerly without padding (the ModelRunner checks `fits`). What is
captured is the RuntimeModel call model(input_ids, positions, attn_metadata).
"""
from __future__ import annotations

import bisect
import functools

import torch

from ascendtile.compilation.piece_capture import DeviceGraph, TorchDeviceGraphs
from ascendtile.model.attention_metadata import AttentionMetadata
from ascendtile.runtime.model_interface import RuntimeModel


def bucket_sizes(max_num_seqs: int) -> list[int]:
    """1, 2, 4, 8, then steps of 8, ending at the first size >= max_num_seqs."""
    sizes = []
    for size in [1, 2, 4, 8] + list(range(16, max_num_seqs + 8, 8)):
        sizes.append(size)
        if size >= max_num_seqs:
            break
    return sizes


class GraphRunner:
    def __init__(self, model: RuntimeModel, max_num_seqs: int, max_model_len: int, block_size: int,
                 device: torch.device, capture: bool) -> None:
        self.model, self.device, self.max_model_len = model, device, max_model_len
        self.buckets = bucket_sizes(max_num_seqs)
        size, width = self.buckets[-1], -(-max_model_len // block_size)
        self.input_ids = torch.zeros(size, dtype=torch.int64, device=device)
        self.positions = torch.zeros(size, dtype=torch.int64, device=device)
        self.slot_mapping = torch.full((size,), -1, dtype=torch.int64, device=device)
        self.block_tables = torch.full((size, width), -1, dtype=torch.int32, device=device)
        self.seqused_k = torch.zeros(size, dtype=torch.int32, device=device)
        self.cu_seqlens_q = torch.arange(size + 1, dtype=torch.int32, device=device)
        self.graphs: dict[int, DeviceGraph] = {}
        self.outputs: dict[int, torch.Tensor] = {}
        if capture:
            self._capture_all()

    def fits(self, num_seqs: int) -> bool:
        return num_seqs <= self.buckets[-1]

    def padded_size(self, num_seqs: int) -> int:
        return self.buckets[bisect.bisect_left(self.buckets, num_seqs)]

    def _meta(self, size: int, max_seqlen_k: int, width: int) -> AttentionMetadata:
        return AttentionMetadata(self.slot_mapping[:size], self.block_tables[:size, :width],
                                 self.cu_seqlens_q[:size + 1], self.seqused_k[:size], 1, max_seqlen_k)

    def run(self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        """One decode step of b = len(input_ids) sequences -> hidden [b, H]."""
        b = input_ids.shape[0]
        size = self.padded_size(b)
        width = meta.block_tables.shape[1]
        self.input_ids[:b].copy_(input_ids)
        self.input_ids[b:size].zero_()
        self.positions[:b].copy_(positions)
        self.positions[b:size].zero_()
        self.slot_mapping[:b].copy_(meta.slot_mapping)
        self.slot_mapping[b:size].fill_(-1)
        self.seqused_k[:b].copy_(meta.seqused_k)
        self.seqused_k[b:size].zero_()
        self.block_tables[:size].fill_(-1)
        self.block_tables[:b, :width].copy_(meta.block_tables)
        graph = self.graphs.get(size)
        if graph is not None:
            graph.replay()
            return self.outputs[size][:b]
        step_meta = self._meta(size, meta.max_seqlen_k, width)
        return self.model(self.input_ids[:size], self.positions[:size], step_meta)[:b]

    @torch.inference_mode()
    def _capture_all(self) -> None:
        """Capture every bucket, largest first, sharing one memory pool. The buffers hold padding
        (slot -1, seqused_k 0) while capturing, so warm-up and capture write no KV."""
        new_graph = TorchDeviceGraphs(self.device.type)  # NPUGraph / CUDAGraph, one shared pool
        width = self.block_tables.shape[1]
        for size in reversed(self.buckets):
            meta = self._meta(size, self.max_model_len, width)
            step = functools.partial(self.model, self.input_ids[:size], self.positions[:size], meta)
            step()  # compiles kernels outside capture
            graph = new_graph()
            self.outputs[size] = graph.capture(step)
            self.graphs[size] = graph
        getattr(torch, self.device.type).synchronize()  # every capture done before the first replay
