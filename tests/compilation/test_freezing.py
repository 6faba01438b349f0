"""CPU level 2 freezes the weights (compilation/freeze.py): Inductor turns every parameter of the
forward into a constant (a probe on the call that does it) and packs every linear for oneDNN (its
counter); the KV caches stay inputs, so caches reallocated after the trace are the ones written;
the logits equal eager; and the frozen graph bypasses Inductor's FX graph cache (torch cannot
pickle oneDNN-packed weights). Without bf16 dot products, frozen bf16 linears are widened to fp32
and packed too. CPU level 2's decode graph is not frozen, and takes Inductor's C++ wrapper. Level
3's pieces are not frozen: test_cache.py."""
from collections import Counter
from types import SimpleNamespace

import pytest
import torch
import torch._inductor.freezing as inductor_freezing
from torch import fx
from torch._dynamo.utils import counters

from ascendtile.compilation import CompilationConfig, compile_model
from ascendtile.compilation.freeze import lift_parameters, taking_kept_inputs
from ascendtile.model import load_model
from ascendtile.model.layers.linear import Linear
from compilation import tiny

pytestmark = pytest.mark.xdist_group("freezing")  # one worker compiles the module's level_2 fixture once
needs_onednn = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="torch built without oneDNN")


def _caches(model) -> list[torch.Tensor]:
    return [cache.clone() for attn in model.attention_layers() for cache in (attn.key_cache, attn.value_cache)]


@pytest.fixture(scope="module")
def level_2(tmp_path_factory):
    """The tiny Llama run eagerly, then compiled at level 2 with Inductor in an empty cache dir;
    what Inductor froze and counted while compiling."""
    model = load_model(tiny.save(tmp_path_factory.mktemp("tiny"))).model
    eager = tiny.run_steps(model)
    eager_caches = _caches(model)
    frozen, replace = [], inductor_freezing.replace_node_with_constant

    def record(gm, node, constant=None, *args, **kwargs):
        frozen.append(constant)
        return replace(gm, node, constant, *args, **kwargs)

    before = Counter(counters["inductor"])
    compiled = compile_model(model, CompilationConfig(level=2, cache_dir=str(tmp_path_factory.mktemp("cache"))))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(inductor_freezing, "replace_node_with_constant", record)
        logits = tiny.run_steps(model, compiled)
    return SimpleNamespace(model=model, compiled=compiled, eager=eager, eager_caches=eager_caches, logits=logits,
                           frozen=frozen, inductor=Counter(counters["inductor"]) - before)


@pytest.mark.slow  # one Inductor compile of the tiny model (tens of seconds on this CPU)
def test_every_weight_of_the_forward_becomes_a_constant(level_2):
    weights = list(level_2.model.model.parameters())  # embedding, layers, final norm (the LM head is outside)
    assert len(level_2.frozen) == len(weights) == 14
    assert {id(t) for t in level_2.frozen} == {id(w) for w in weights}
    assert level_2.compiled.backend.num_compiles == 1


@needs_onednn
@pytest.mark.slow
def test_every_linear_is_packed_for_onednn(level_2):
    linears = sum(isinstance(m, Linear) for m in level_2.model.model.modules())
    assert linears == 8  # qkv, o, gate_up, down per layer
    assert level_2.inductor["mkldnn_linear_weight_pack_matcher_count"] == linears


@pytest.mark.slow
def test_frozen_logits_equal_eager(level_2):
    for got, want in zip(level_2.logits, level_2.eager):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-5)


@pytest.mark.slow
def test_kv_caches_stay_inputs(level_2):
    """A second run allocates new caches (tiny.run_steps): the compiled graph writes those, as eager
    wrote its own, and reads them back (level 2 evaluates no guards, so a cache baked into the graph
    would be written instead, silently)."""
    logits = tiny.run_steps(level_2.model, level_2.compiled)
    for got, want in zip(_caches(level_2.model), level_2.eager_caches):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-5, equal_nan=True)
    for got, want in zip(logits, level_2.eager):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-5)


@pytest.mark.slow
def test_frozen_graph_bypasses_the_fx_graph_cache(level_2):
    assert level_2.inductor["fxgraph_cache_bypass"] >= 1
    assert not level_2.inductor["fxgraph_cache_hit"] and not level_2.inductor["fxgraph_cache_miss"]


def test_decode_graphs_take_the_cpp_wrapper_built_apart_not_freezing(monkeypatch, tmp_path):
    """Inductor's config as compile_fx sees it: a decode graph (CompiledModel's, CPU level 2) with
    the C++ wrapper built apart from its kernels and its weights as inputs; the general graph with
    the Python wrapper, frozen."""
    import torch._inductor.compile_fx as compile_fx_module
    import torch._inductor.config as inductor_config

    from ascendtile.compilation.backend import AscendBackend

    seen = []

    def spying_compile_fx(gm, example_inputs):
        seen.append((inductor_config.cpp_wrapper, inductor_config.cpp_wrapper_build_separate, inductor_config.freezing))
        return gm.forward

    monkeypatch.setattr(compile_fx_module, "compile_fx", spying_compile_fx)
    inputs = [torch.randn(3, 48), torch.nn.Parameter(torch.randn(40, 48), requires_grad=False)]
    config = CompilationConfig(level=2, cache_dir=str(tmp_path))
    for decode in (True, False):
        AscendBackend(config, "cpu", decode=decode)(_linear_graph(False), inputs)
    assert seen == [(True, True, False), (False, False, True)]


def _linear_graph(bias: bool) -> fx.GraphModule:
    def forward(x, weight, bias):
        return torch.nn.functional.linear(x, weight, bias) * 2
    def forward_without_bias(x, weight):
        return torch.nn.functional.linear(x, weight) * 2
    return fx.symbolic_trace(forward if bias else forward_without_bias)


@needs_onednn
@pytest.mark.slow  # Inductor compiles of a one-linear graph (seconds each)
@pytest.mark.parametrize("bias, has_bf16_dot", [(True, False), (False, False), (False, True)])
def test_bf16_linears_freeze_widened_and_packed_without_bf16_dot_products(bias, has_bf16_dot, monkeypatch, tmp_path):
    """On a CPU without bf16 dot products (as this test tells the backend), a frozen bf16 linear is
    widened to fp32 (the backend's count) and Inductor packs its folded fp32 weight (Inductor's
    count); the product, rounded to bf16 once, is the fp32 product of the bf16 values. With bf16
    dot products nothing is widened."""
    from ascendtile.compilation import backend as backend_module

    torch.manual_seed(0)
    weight = torch.nn.Parameter(torch.randn(40, 48).bfloat16(), requires_grad=False)
    inputs = [torch.randn(33, 48).bfloat16(), weight]
    if bias:
        inputs.append(torch.nn.Parameter(torch.randn(40).bfloat16(), requires_grad=False))
    inputs[0][3, 5] = float("nan")  # a NaN row stays NaN, the others are untouched by it
    want = (torch.nn.functional.linear(*[t.float() for t in inputs]) * 2).bfloat16()
    monkeypatch.setattr(backend_module, "cpu_has_bf16_dot", lambda: has_bf16_dot)
    backend = backend_module.AscendBackend(CompilationConfig(level=2, cache_dir=str(tmp_path)), "cpu")
    before = Counter(counters["inductor"])
    with torch.no_grad():  # Inductor freezes only with grad off
        got = backend(_linear_graph(bias), inputs)(*inputs)
    packed = (Counter(counters["inductor"]) - before)["mkldnn_linear_weight_pack_matcher_count"]
    assert backend.widened_linears == ([] if has_bf16_dot else [1])
    if not has_bf16_dot:
        assert packed == 1
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got, want, rtol=1.6e-2, atol=1e-2, equal_nan=True)  # up to the summation order
    assert got[3].isnan().all() and not got[torch.arange(33) != 3].isnan().any()


def _graph_of_three_inputs() -> fx.GraphModule:
    def forward(x, weight, int8_weight):
        return x @ weight.t() + int8_weight.float().sum()
    return fx.symbolic_trace(forward)


def test_lift_parameters_lifts_float_parameters_only():
    gm = _graph_of_three_inputs()
    x = torch.randn(3, 5)
    weight = torch.nn.Parameter(torch.randn(7, 5), requires_grad=False)
    int8_weight = torch.nn.Parameter(torch.randint(-5, 5, (2, 2), dtype=torch.int8), requires_grad=False)
    lifted, kept = lift_parameters(gm, [x, weight, int8_weight])
    assert kept == [0, 2]
    assert [name for name, _ in lifted.named_parameters()] == ["frozen_weight"]
    assert lifted.frozen_weight is weight
    assert len(gm.graph.find_nodes(op="placeholder")) == 3  # Dynamo reads its call arguments off this graph
    want = gm(x, weight, int8_weight)
    torch.testing.assert_close(lifted(x, int8_weight), want, rtol=0, atol=0)
    torch.testing.assert_close(taking_kept_inputs(lifted, kept)(x, weight, int8_weight), want, rtol=0, atol=0)


def test_lift_parameters_rejects_a_wrong_number_of_inputs():
    with pytest.raises(ValueError, match="^example_inputs: 2 values for 3 graph inputs"):
        lift_parameters(_graph_of_three_inputs(), [torch.randn(3, 5), torch.randn(7, 5)])
