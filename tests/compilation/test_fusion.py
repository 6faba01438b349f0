"""Fusion passes on the captured graph of a tiny W8A8 Llama (levels 2 and 3): the compiled graph holds the fused
norm/activation + quant ops and none of the pairs they replace, and its logits equal eager."""
import copy

import pytest
import torch
from torch import fx

from ascendtile.compilation import CompilationConfig, compile_model
from ascendtile.compilation.passes.fusion import FUSIONS
from ascendtile.compilation.passes.graph import ascend_op
from ascendtile.compilation.passes.split_w8a8 import split_w8a8_linears
from ascendtile.model import load_model, quantize_w8a8
from compilation import tiny
from model.helpers import PagedDriver

PROMPT = {0: list(range(3, 16)), 1: [5, 9, 100, 7, 2]}
DECODE = {0: [17], 1: [4]}
# per layer: input norm (the first layer's a plain rms_norm), post-attention norm, and for static
# activations the down projection's silu_and_mul; the final norm feeds the LM head, outside.
FUSED = {
    "dynamic": {"rms_norm_dynamic_per_token_quant": 4},
    "static": {"rms_norm_static_int8_quant": 1, "fused_add_rms_norm_static_int8_quant": 3, "silu_and_mul_quant": 2},
}
# the unfused ops a fusion took; with dynamic activations silu_and_mul stays (its fusion is static only)
PAIRS = {"dynamic": ("rms_norm", "static_scaled_int8_quant", "dynamic_scaled_int8_quant"),
         "static": ("rms_norm", "silu_and_mul", "static_scaled_int8_quant", "dynamic_scaled_int8_quant")}


@pytest.fixture(scope="module")
def float_model(tmp_path_factory):
    return load_model(tiny.save(tmp_path_factory.mktemp("tiny"))).model


def _quantized(float_model, activation):
    calibrate = (lambda m: PagedDriver(m, 2).step(PROMPT)) if activation == "static" else None
    return quantize_w8a8(copy.deepcopy(float_model), activation=activation, calibration=calibrate)


def _two_steps(model, compiled=None):
    driver = PagedDriver(model, 2)
    if compiled is not None:
        driver.model = compiled  # the driver calls model(...) and model.compute_logits(...)
    return driver.step(PROMPT), driver.step(DECODE)


@pytest.mark.parametrize("activation", ["dynamic", "static"])
def test_graph_has_fused_ops_and_logits_equal_eager(float_model, activation):
    model = _quantized(float_model, activation)
    eager = _two_steps(model)
    compiled = compile_model(model, CompilationConfig(level=2, use_inductor=False))
    got = _two_steps(model, compiled)
    assert compiled.backend.num_compiles == 1
    ops = compiled.backend.graph_ops[0]
    for name, count in FUSED[activation].items():
        assert ops.count(name) == count, (name, ops)
    assert not [name for name in ops if name in PAIRS[activation]], ops
    # the final norm stays: its output feeds the LM head in float
    assert ops.count("fused_add_rms_norm") == 1
    for g, e in zip(got, eager):  # CPU references of the fused ops are the pair's: exact
        torch.testing.assert_close(g, e, rtol=0, atol=1e-5)


def test_fusion_off_keeps_the_pairs(float_model):
    model = _quantized(float_model, "dynamic")
    compiled = compile_model(model, CompilationConfig(level=2, use_inductor=False, enable_fusion=False))
    _two_steps(model, compiled)
    ops = compiled.backend.graph_ops[0]
    assert "rms_norm_dynamic_per_token_quant" not in ops and ops.count("w8a8_linear") == 8


def test_float_model_is_untouched(float_model):
    compiled = compile_model(copy.deepcopy(float_model), CompilationConfig(level=2, use_inductor=False))
    _two_steps(compiled.model, compiled)
    assert all(count == 0 for count in compiled.backend.pass_counts[0].values())


def test_inductor_with_references_matches_eager(float_model, tmp_path):
    """CPU level 2 as shipped: fusion, the decomposable ops as torch references, Inductor."""
    model = _quantized(float_model, "dynamic")
    eager = _two_steps(model)
    compiled = compile_model(model, CompilationConfig(level=2, cache_dir=str(tmp_path / "inductor")))
    got = _two_steps(model, compiled)
    assert compiled.backend.num_compiles == 1
    assert any((tmp_path / "inductor").iterdir())
    for g, e in zip(got, eager):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)


def test_level_3_pieces_hold_the_fused_ops(float_model):
    """The fusion passes run before the split: the pieces between the attention ops carry the
    fused ops (and none of the pairs), and the logits still equal eager."""
    model = _quantized(float_model, "static")
    eager = _two_steps(model)
    compiled = compile_model(model, CompilationConfig(level=3, use_inductor=False))
    got = _two_steps(model, compiled)
    split = compiled.backend.splits[0]
    ops = [name for piece in split.pieces for name in map(ascend_op, split.submodule(piece).graph.nodes) if name]
    for name, count in FUSED["static"].items():
        assert ops.count(name) == count, (name, ops)
    assert not [name for name in ops if name in PAIRS["static"]], ops
    for g, e in zip(got, eager):
        torch.testing.assert_close(g, e, rtol=0, atol=1e-5)


NORM_FUSIONS = [f for f in FUSIONS if f.producer in ("rms_norm", "fused_add_rms_norm")]


def _norm_graph(producer: str, with_weight: bool) -> tuple[fx.Graph, fx.Node]:
    """producer(a, b, w or None, eps) writing a (rms_norm's out, fused_add_rms_norm's input): the
    graph and a."""
    graph = fx.Graph()
    a, b = graph.placeholder("a"), graph.placeholder("b")
    weight = graph.placeholder("w") if with_weight else None
    graph.call_function(getattr(torch.ops.ascend, producer).default, (a, b, weight, 1e-5))
    return graph, a


@pytest.mark.parametrize("fusion", NORM_FUSIONS, ids=lambda f: f.name)
@pytest.mark.parametrize("with_weight", [True, False])
def test_norm_without_weight_stays_unfused(fusion, with_weight):
    """The fused norm + quant ops take a weight tensor: a norm called with weight=None keeps its
    quant (fusing it would pass None where the fused op needs a tensor)."""
    graph, written = _norm_graph(fusion.producer, with_weight)
    q, scale = graph.placeholder("q"), graph.placeholder("scale")
    graph.call_function(getattr(torch.ops.ascend, fusion.quant).default, (q, written, scale, None))
    assert fusion.apply(graph) == int(with_weight)
    ops = [ascend_op(n) for n in graph.nodes if ascend_op(n)]
    if with_weight:  # the one fused op, e.g. rms_norm_dynamic_per_token_quant
        assert len(ops) == 1 and ops[0].startswith(("rms_norm_", "fused_add_rms_norm_")) and ops[0].endswith("quant")
    else:
        assert ops == [fusion.producer, fusion.quant]


@pytest.mark.parametrize("with_weight", [True, False])
def test_w8a8_after_norm_without_weight_stays_whole(with_weight):
    """split_w8a8 splits a linear only for a fusion that can then take the quant."""
    graph, written = _norm_graph("rms_norm", with_weight)
    written.meta["example_value"] = torch.empty(4, 8)
    linear = graph.call_function(torch.ops.ascend.w8a8_linear.default,
                                 (written, graph.placeholder("wq"), graph.placeholder("ws"), None, None))
    linear.meta["example_value"] = torch.empty(4, 16)
    graph.output(linear)
    assert split_w8a8_linears(graph, FUSIONS) == int(with_weight)
