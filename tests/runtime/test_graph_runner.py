"""GraphRunner on CPU: bucket sizes, and a padded-bucket decode step through the static buffers
equals the unpadded eager step — same hidden rows, same KV writes, padding rows write nothing."""
from __future__ import annotations

import pytest
import torch

from ascendtile.bench.stub_model import StubModel
from ascendtile.runtime.graph_runner import GraphRunner, bucket_sizes
from ascendtile.runtime.model_runner import ModelRunner
from ascendtile.runtime.sampler import Sampler
from ascendtile.runtime.sampling_params import SamplingParams
from ascendtile.runtime.scheduler import ScheduledBatch
from ascendtile.runtime.sequence import Sequence

BLOCK = 4
NUM_BLOCKS = 160


@pytest.mark.parametrize("max_num_seqs, expected", [
    (1, [1]), (3, [1, 2, 4]), (8, [1, 2, 4, 8]), (16, [1, 2, 4, 8, 16]),
    (32, [1, 2, 4, 8, 16, 24, 32]), (33, [1, 2, 4, 8, 16, 24, 32, 40]),
])
def test_bucket_sizes(max_num_seqs, expected):
    assert bucket_sizes(max_num_seqs) == expected


def _decode_batch(num_seqs: int) -> ScheduledBatch:
    """num_seqs sequences of different lengths, all computed but their newest token."""
    seqs, next_block = [], 0
    for i in range(num_seqs):
        seq = Sequence(i, [(i * 7 + k) % 50 + 1 for k in range(3 + 5 * i)], SamplingParams(), 256)
        blocks = -(-len(seq) // BLOCK)
        seq.assign_blocks(list(range(next_block, next_block + blocks)), len(seq) - 1)
        next_block += blocks
        seqs.append(seq)
    return ScheduledBatch(seqs, [1] * num_seqs)


@pytest.mark.parametrize("num_seqs", [1, 3, 5, 13])
def test_padded_bucket_decode_equals_eager(num_seqs):
    batch = _decode_batch(num_seqs)
    results = []
    for use_graph in (False, True):
        model = StubModel()
        model.allocate_kv_cache(NUM_BLOCKS, BLOCK, torch.float32, "cpu")
        for seq in batch.seqs:  # the context's KV, as earlier steps would have written it
            for pos in range(len(seq) - 1):
                model.cache[seq.block_table[pos // BLOCK], pos % BLOCK] = seq.token_ids[pos]
        graph = GraphRunner(model, 16, 256, BLOCK, torch.device("cpu"), capture=False) if use_graph else None
        runner = ModelRunner(model, BLOCK, NUM_BLOCKS, torch.device("cpu"), Sampler(torch.device("cpu")), graph)
        inputs = runner.prepare(batch)
        if use_graph:
            hidden = graph.run(inputs.input_ids, inputs.positions, inputs.meta)
            assert model.calls[-1] == (graph.padded_size(num_seqs),) * 2  # ran as the padded bucket
        else:
            hidden = model(inputs.input_ids, inputs.positions, inputs.meta)
        results.append((hidden.clone(), model.cache.clone()))
    (eager_h, eager_cache), (graph_h, graph_cache) = results
    assert graph_h.shape == eager_h.shape == (num_seqs, 1)
    torch.testing.assert_close(graph_h, eager_h)
    torch.testing.assert_close(graph_cache, eager_cache, equal_nan=True)  # padding wrote no KV


def test_padding_rows_reset_between_steps():
    model = StubModel()
    model.allocate_kv_cache(NUM_BLOCKS, BLOCK, torch.float32, "cpu")
    graph = GraphRunner(model, 16, 256, BLOCK, torch.device("cpu"), capture=False)
    runner = ModelRunner(model, BLOCK, NUM_BLOCKS, torch.device("cpu"), Sampler(torch.device("cpu")), graph)
    for seq in _decode_batch(7).seqs:
        for pos in range(len(seq) - 1):
            model.cache[seq.block_table[pos // BLOCK], pos % BLOCK] = seq.token_ids[pos]
    big = runner.prepare(_decode_batch(7))
    graph.run(big.input_ids, big.positions, big.meta)
    small = runner.prepare(_decode_batch(5))  # same bucket (8): rows 5..7 must be padding again
    graph.run(small.input_ids, small.positions, small.meta)
    assert graph.slot_mapping[5:8].tolist() == [-1] * 3 and graph.seqused_k[5:8].tolist() == [0] * 3
    assert (graph.block_tables[5:8] == -1).all()
    assert graph.fits(16) and not graph.fits(17)


class _RecordingGraph:
    """A DeviceGraph that records: capture runs the step once (as a real capture records it) and
    keeps its outputs; replay runs it again on whatever the static buffers hold then."""

    log: list[str] = []

    def capture(self, fn):
        self.fn = fn
        self.log.append("capture")
        return fn()

    def replay(self) -> None:
        self.log.append("replay")
        self.outputs.copy_(self.fn())  # a real replay rewrites the captured output tensors in place


def test_capture_warms_up_then_captures_every_bucket_and_run_replays(monkeypatch):
    from ascendtile.runtime import graph_runner

    _RecordingGraph.log = []
    monkeypatch.setattr(graph_runner, "TorchDeviceGraphs", lambda device_type: _RecordingGraph)
    model = StubModel()
    model.allocate_kv_cache(NUM_BLOCKS, BLOCK, torch.float32, "cpu")
    graph = GraphRunner(model, 8, 256, BLOCK, torch.device("cpu"), capture=True)
    # largest bucket first (one memory pool grows once), each warmed up eagerly before its capture
    assert [tokens for tokens, _ in model.calls] == [8, 8, 4, 4, 2, 2, 1, 1]
    assert _RecordingGraph.log == ["capture"] * 4 and set(graph.graphs) == {1, 2, 4, 8}
    for size, captured in graph.graphs.items():
        captured.outputs = graph.outputs[size]
    batch = _decode_batch(3)
    for seq in batch.seqs:
        for pos in range(len(seq) - 1):
            model.cache[seq.block_table[pos // BLOCK], pos % BLOCK] = seq.token_ids[pos]
    runner = ModelRunner(model, BLOCK, NUM_BLOCKS, torch.device("cpu"), Sampler(torch.device("cpu")), graph)
    inputs = runner.prepare(batch)
    with torch.inference_mode():  # as ModelRunner.execute runs it; the captured outputs are inference tensors
        hidden = graph.run(inputs.input_ids, inputs.positions, inputs.meta).clone()
        eager = model(inputs.input_ids, inputs.positions, inputs.meta)
    assert _RecordingGraph.log[-1] == "replay" and hidden.shape == (3, 1)
    torch.testing.assert_close(hidden, eager)
