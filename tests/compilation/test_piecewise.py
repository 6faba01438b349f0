"""Level 3 (piecewise) on the tiny Llama: one Dynamo compile, the graph cut into one more piece than
there are attention calls, no splitting op inside a piece, each splitting op (with the KV write
that fills its cache) run eagerly between two pieces, and logits equal to eager. The embedded
SmolLM2 at level 3 is in test_levels_smollm2.py."""
import copy

import pytest
import torch

from ascendtile.compilation import CompilationConfig, compile_model
from ascendtile.compilation.passes.graph import ascend_op
from ascendtile.model import load_model
from compilation import tiny

ATTENTION = "unified_attention"


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return load_model(tiny.save(tmp_path_factory.mktemp("tiny"))).model


def ops_of(module) -> list[str]:
    return [name for name in map(ascend_op, module.graph.nodes) if name]


def test_level_3_splits_at_attention_and_matches_eager(model):
    model = copy.deepcopy(model)
    eager = tiny.run_steps(model)
    compiled = compile_model(model, CompilationConfig(level=3, use_inductor=False))
    got = tiny.run_steps(model, compiled)
    backend = compiled.backend
    assert backend.num_compiles == 1
    split = backend.splits[0]
    num_attention = backend.graph_ops[0].count(ATTENTION)
    assert num_attention == 2 and len(split.pieces) == num_attention + 1
    for name in split.pieces:
        assert not set(ops_of(split.submodule(name))) & {ATTENTION, "reshape_and_cache_flash"}, name
    for name in split.splitting:  # the attention op and the KV write of its layer, nothing else
        assert sorted(ops_of(split.submodule(name))) == ["reshape_and_cache_flash", ATTENTION], name
    # the top-level graph calls piece, attention, piece, attention, piece
    calls = [node.target for node in split.module.graph.nodes if node.op == "call_module"]
    assert calls == [name for pair in zip(split.pieces, split.splitting + [None]) for name in pair if name]
    assert "(3 pieces)" in compiled.describe()
    for g, e in zip(got, eager):
        torch.testing.assert_close(g, e, rtol=0, atol=1e-5)


def test_splitting_ops_config_decides_the_cut(model):
    """Splitting at an op the model does not call leaves one piece: the whole graph."""
    model = copy.deepcopy(model)
    eager = tiny.run_steps(model)
    config = CompilationConfig(level=3, use_inductor=False, splitting_ops=["ascend::mla_attention"])
    compiled = compile_model(model, config)
    got = tiny.run_steps(model, compiled)
    split = compiled.backend.splits[0]
    assert len(split.pieces) == 1 and not split.splitting
    assert ops_of(split.submodule(split.pieces[0])).count(ATTENTION) == 2
    for g, e in zip(got, eager):
        torch.testing.assert_close(g, e, rtol=0, atol=1e-5)
