"""DeepSeek-V2 at compilation levels 1, 2 and 3 gives level 0's logits over the paged cache, on
tiny random checkpoints with a dense layer then an MoE layer (MLA without q_lora_rank and greedy
top-2 routing; MLA with q_lora_rank and group-limited routing). Levels 2 and 3 trace with fullgraph
and dynamic sizes, which the routed experts' loop over the experts a batch hits (data-dependent
sizes) cannot be part of: it reaches the graph as one opaque op, `ascendtile::routed_experts`, that
level 3 keeps inside a piece, a piece that is then not captured on a device (the loop syncs with
the host). One compile serves every step, the one-token steps included (MLA takes no guard on the
token count). Inductor runs once at level 2 and once at level 3; the other combinations run the
Dynamo graph as is."""
import copy

import pytest
import torch

from ascendtile.compilation import CaptureSpec, CompilationConfig, compile_model
from ascendtile.model import load_model
from ascendtile.model.layers.moe import MoE
from compilation import tiny
from compilation.test_piece_capture import FakeGraph
from model.helpers import save_tiny
from model.test_deepseek_v2_parity import CASES
from tolerances import assert_close


def _variant(case: str, **fields):
    """A copy of a parity-test config with some fields changed (save_tiny writes into its config)."""
    config = copy.deepcopy(CASES[case])
    for name, value in fields.items():
        setattr(config, name, value)
    return config


MODELS = {
    "moe": _variant("moe_greedy"),  # layer 0 dense, layer 1 top-2 of 4 experts + 1 shared
    "moe_q_lora_grouped": _variant("moe_greedy", q_lora_rank=24, n_routed_experts=8, n_group=4, topk_group=2,
                                   topk_method="group_limited_greedy"),
}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """case -> (model, its level 0 logits of tiny.STEPS)."""
    loaded = {}
    for case, config in MODELS.items():
        directory = tmp_path_factory.mktemp(case)
        save_tiny(config, directory, randomize_norms=True)
        model = load_model(str(directory)).model
        loaded[case] = model, tiny.run_steps(model)
    return loaded


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("compile_cache"))


def _routed_experts_calls(module: torch.fx.GraphModule) -> int:
    return sum(node.target is torch.ops.ascendtile.routed_experts.default for node in module.graph.nodes)


@pytest.mark.parametrize("case, level, use_inductor", [
    ("moe", 1, False),
    pytest.param("moe", 2, True, marks=pytest.mark.slow),  # Inductor: ~20 s of this file's ~35
    pytest.param("moe", 3, True, marks=pytest.mark.slow),
    ("moe_q_lora_grouped", 1, False), ("moe_q_lora_grouped", 2, False), ("moe_q_lora_grouped", 3, False),
])
def test_level_matches_eager(models, cache_dir, case, level, use_inductor):
    model, eager = models[case]
    model = copy.deepcopy(model)
    compiled = compile_model(model, CompilationConfig(level=level, use_inductor=use_inductor, cache_dir=cache_dir))
    got = tiny.run_steps(model, compiled)  # the token count changes every step
    for g, e in zip(got, eager):  # the Dynamo graph runs the same ops in the same order: exact
        assert_close(g, e, **({} if use_inductor else {"rtol": 0, "atol": 0}))
    backend = compiled.backend
    if level >= 2:
        assert backend.num_compiles == 1
        assert backend.graph_ops[0].count("mla_attention") == 2
    if level == 3:
        split = backend.splits[0]
        assert len(split.pieces) == 3  # piece, attention, piece, attention, piece
        assert [_routed_experts_calls(split.submodule(name)) for name in split.pieces] == [0, 0, 1]
        assert not any(_routed_experts_calls(split.submodule(name)) for name in split.splitting)


def test_piece_holding_routed_experts_is_not_captured(models, cache_dir):
    """The routed experts read expert ids on the host, which a device graph cannot hold: with a
    capture spec (test_piece_capture.py's fake graph on CPU) the piece that calls them runs
    uncaptured and the two others are captured, with level 0's logits."""
    model, eager = models["moe"]
    model = copy.deepcopy(model)
    compiled = compile_model(model, CompilationConfig(level=3, use_inductor=False, cache_dir=cache_dir),
                             CaptureSpec(FakeGraph, (1, 2, 4)))
    got = tiny.run_steps(model, compiled)
    for g, e in zip(got, eager):
        assert_close(g, e)
    split = compiled.backend.splits[0]
    assert [piece.name for piece in compiled.backend.captured] == split.pieces[:2]
    assert _routed_experts_calls(split.submodule(split.pieces[2])) == 1


def test_a_copy_dispatches_to_its_own_experts():
    """The op finds its layer by a key: a deep copy registers its own, so a traced copy whose
    experts changed runs them, not the original's (deep copies are how tests quantize a model)."""
    moe = MoE(16, 8, num_experts=4, top_k=2, num_shared_experts=0, routed_scaling_factor=1.0)
    with torch.no_grad():
        for param in moe.parameters():
            param.normal_()
    clone = copy.deepcopy(moe)
    with torch.no_grad():
        for expert in clone.experts:
            expert.down_proj.weight.mul_(2)
    x = torch.randn(5, 16)
    traced = torch.compile(clone, backend="eager", fullgraph=True, dynamic=True)
    assert_close(traced(x), 2 * moe(x))
    assert clone.dispatch_key != moe.dispatch_key


def test_unknown_layer_key_is_named():
    x, weights, ids = torch.randn(3, 16), torch.rand(3, 2), torch.zeros(3, 2, dtype=torch.int64)
    with pytest.raises(KeyError, match="layer: no live MoE layer is registered as 'missing'"):
        torch.ops.ascendtile.routed_experts(x, weights, ids, "missing")
