"""Compilation levels end to end through LLM on a tiny random Llama: greedy tokens equal level 0
at levels 1, 2 and 3, and levels 2 and 3 compile once over a 64-step generation whose steps change the
token count, batch size, block-table width and max_seqlen ints (prefill, mixed, decode of 4 down
to 1 sequences); over an int8 KV cache too (its scale caches are graph inputs beside the caches).
CPU level 2's decode graph (compiled_model.py, opt-in: cpu_decode_graph) traces once too and leaves
no opaque op over float caches (only the int8 KV write and attention over int8 ones); it retraces for caches of another
shape and leaves no static mark on them. On an AMX CPU its bf16 form frozen for Inductor's GEMM template serves every
batch size over one and matches the unfrozen one, and the general graph's bf16 attention runs on AMX tiles with the
256-bit kernel's tokens."""
import pytest
import torch

from ascendtile.compilation import CompilationConfig, CompiledModel, compile_model
from ascendtile.compilation.backend import AscendBackend
from ascendtile.compilation.config import default_cache_dir
from ascendtile.cpu import decode_attention as cpu_decode_attention
from ascendtile.cpu import build, dispatch
from ascendtile.cpu import linear as cpu_linear
from ascendtile.cpu import reshape_and_cache_flash as cpu_reshape_and_cache_flash
from ascendtile.cpu import rotary_embedding as cpu_rotary_embedding
from ascendtile.cpu import unified_attention as cpu_unified_attention
from ascendtile.model import load_model
from ascendtile.model.layers import int4pack
from ascendtile.model.layers import linear as linear_module
from ascendtile.runtime import LLM, SamplingParams
from compilation import tiny
from model.helpers import save_tiny

PROMPTS = [[5, 9, 100, 7, 2, 33, 61], [11, 12], [40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57],
           [3], [90, 91, 92]]
MAX_TOKENS = [64, 9, 30, 20, 5]  # staggered finishes: the batch shrinks, later prompts join mid-decode


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return tiny.save(tmp_path_factory.mktemp("tiny"))


def _llm(tiny_dir, compilation_config, graph="off", kv_cache_dtype="auto", quantization=None) -> LLM:
    return LLM(tiny_dir, max_model_len=256, max_num_seqs=4, num_kv_blocks=64, graph=graph,
               compilation_config=compilation_config, kv_cache_dtype=kv_cache_dtype, quantization=quantization)


def _tokens(llm, max_tokens=MAX_TOKENS):
    params = [SamplingParams(temperature=0, max_tokens=n, ignore_eos=True) for n in max_tokens]
    outputs = llm.generate(PROMPTS[:len(max_tokens)], params, use_tqdm=False)
    return [o.outputs[0].token_ids for o in outputs]


def _generate(tiny_dir, compilation_config, graph="off", kv_cache_dtype="auto", max_tokens=MAX_TOKENS,
              quantization=None):
    llm = _llm(tiny_dir, compilation_config, graph, kv_cache_dtype, quantization)
    return llm, _tokens(llm, max_tokens)


@pytest.fixture(scope="module")
def eager_tokens(tiny_dir):
    llm, tokens = _generate(tiny_dir, None)
    assert llm.engine.model is llm.model  # level 0: the model itself
    return tokens


@pytest.mark.parametrize("level, graph", [(2, "off"), (2, "auto"), (3, "auto")])
def test_levels_2_and_3_compile_once_over_64_steps(tiny_dir, eager_tokens, level, graph):
    kernel_calls = cpu_decode_attention.calls
    llm, tokens = _generate(tiny_dir, {"level": level, "use_inductor": False, "cpu_decode_graph": level == 2}, graph)
    assert llm.last_stats.num_steps >= 64
    assert isinstance(llm.engine.model, CompiledModel)
    assert llm.engine.model.backend.num_compiles == 1
    assert len(llm.engine.model.backend.splits) == (level == 3)
    decode = llm.engine.model.decode_backend
    if level == 2:  # every decode step (4 sequences down to 1) ran the decode graph, decomposed
        assert decode.num_compiles == 1 and decode.opaque_ops == [[]]
        # Dynamo (guards evaluated) saw the first step of 4 sequences and the first of 1, whose
        # one entry served both; every other decode step called that entry's bytecode directly
        calls = llm.engine.model.decode_calls
        assert calls["guarded"] == 2 and calls["direct"] >= 60
        layers = tiny.CONFIG.num_hidden_layers  # the decode graph's attention: the C++ kernel's op
        assert cpu_decode_attention.calls - kernel_calls == layers * (calls["guarded"] + calls["direct"])
    else:
        assert decode is None
    assert tokens == eager_tokens


@pytest.fixture(scope="module")
def eager_int8_tokens(tiny_dir):
    return _generate(tiny_dir, None, kv_cache_dtype="int8")[1]


def test_level_3_over_an_int8_kv_cache(tiny_dir, eager_int8_tokens):
    """Level 3 splits at attention with the int8 write joining it (it writes the caches and scale
    caches the attention reads); greedy tokens equal level 0's over the same int8 cache."""
    llm, tokens = _generate(tiny_dir, {"level": 3, "use_inductor": False}, "auto", kv_cache_dtype="int8")
    assert llm.engine.model.backend.num_compiles == 1 and len(llm.engine.model.backend.splits) == 1
    assert tokens == eager_int8_tokens


def test_level_2_decode_graph_over_an_int8_kv_cache(tiny_dir, eager_int8_tokens):
    llm, tokens = _generate(tiny_dir, {"level": 2, "use_inductor": False, "cpu_decode_graph": True},
                            kv_cache_dtype="int8")
    layers = tiny.CONFIG.num_hidden_layers
    assert llm.engine.model.decode_backend.opaque_ops == [["reshape_and_cache_flash", "unified_attention"] * layers]
    assert tokens == eager_int8_tokens


@pytest.mark.skipif(not int4pack.cpu_vectorises_int4pack(), reason="no int4 pack on this CPU")
def test_level_2_decode_graph_takes_the_int4_pack(tiny_dir):
    """W4A16 (RTN, bf16 activations): the decode graph multiplies through torch's int4 kernel, as
    eager decode does, so no w4a16_linear op is left in it; the packs enter it with static shapes
    (symbolic ones reach the q/k/v slices, which Inductor cannot lower); the general graph, which
    runs without evaluating guards, keeps the exact op. Greedy tokens equal eager W4A16's."""
    eager = _generate(tiny_dir, None, quantization="w4a16")[1]
    llm = _llm(tiny_dir, {"level": 2, "use_inductor": False, "cpu_decode_graph": True}, quantization="w4a16")
    model, linears = llm.engine.model, 4 * tiny.CONFIG.num_hidden_layers
    backend, pack_shapes = model.decode_backend, []

    def spying_backend(gm, example_inputs):
        pack_shapes.extend(node.meta["example_value"].shape for node in gm.graph.nodes if node.op == "placeholder"
                           and node.name.endswith(("_packed_packed", "_packed_scale_and_zeros")))
        return backend(gm, example_inputs)

    model.decode_backend = spying_backend
    tokens = _tokens(llm)
    model.decode_backend = backend
    assert len(pack_shapes) == 2 * linears and all(isinstance(size, int) for shape in pack_shapes for size in shape)
    assert model.backend.graph_ops[0].count("w4a16_linear") == linears
    assert backend.num_compiles == 1 and backend.opaque_ops == [[]]
    assert tokens == eager


@pytest.mark.skipif(not int4pack.cpu_vectorises_int4pack(), reason="no int4 pack on this CPU")
def test_level_2_decode_graph_keys_the_int4_row_bound(tiny_dir, monkeypatch):
    """W4A16 packs' row bound (lowered to 2 rows) is a guard of the decode graph: the batches of 4
    run an entry with the exact op, those of 2 one with the int4 kernel, and the direct calls keep
    them apart (the bound is part of their key; without it the batches of 2 would run the first
    entry), so each entry goes through Dynamo once. Greedy tokens equal eager W4A16's, whose
    linears switch at the same bound."""
    monkeypatch.setattr(int4pack, "INT4PACK_MAX_ROWS", 2)
    max_tokens = [20, 20, 10, 10]  # 4 sequences decode together, then 2
    eager = _generate(tiny_dir, None, quantization="w4a16", max_tokens=max_tokens)[1]
    llm = _llm(tiny_dir, {"level": 2, "use_inductor": False, "cpu_decode_graph": True}, quantization="w4a16")
    tokens = _tokens(llm, max_tokens)
    model, linears = llm.engine.model, 4 * tiny.CONFIG.num_hidden_layers
    assert model.decode_backend.opaque_ops == [["w4a16_linear"] * linears, []]
    assert model.decode_calls == {"guarded": 2, "direct": 17}
    assert tokens == eager


def _count_onednn_linears(monkeypatch) -> dict[str, list[int]]:
    """Per compile from now on, of the general and of the decode graphs: their onednn_linear calls,
    whose packed weights must enter with static shapes (one symbol pair per linear otherwise)."""
    op = torch.ops.ascendtile.onednn_linear.default
    counts, compile_graph = {"general": [], "decode": []}, AscendBackend.__call__

    def spying_call(backend, gm, example_inputs):
        calls = [node for node in gm.graph.nodes if node.target is op]
        assert all(isinstance(size, int) for node in calls for size in node.args[2].meta["example_value"].shape)
        counts["decode" if backend.decode else "general"].append(len(calls))
        return compile_graph(backend, gm, example_inputs)

    monkeypatch.setattr(AscendBackend, "__call__", spying_call)
    return counts


def test_level_2_decode_graph_takes_the_onednn_packs(tmp_path, monkeypatch):
    """fp32 weights packed for oneDNN (the size bound lowered so that the tiny model's pack too):
    the decode graph multiplies with one ascendtile::cpu_linear per linear, in place of the
    onednn_linear that traced, with its packed copy. Products of up to cpu_linear.MAX_ROWS rows (1
    here: dispatch.set_linear_max_rows) run the C++ kernel, more the packed product; the general graph keeps F.linear (Inductor
    freezes and packs it at level 2). The LM head (compiled.compute_logits) goes through the same op
    for products of up to cpu_linear.MAX_ROWS rows. Logits equal eager's."""
    monkeypatch.setattr(linear_module, "ONEDNN_MIN_WEIGHT_ELEMENTS", 0)
    monkeypatch.setattr(linear_module, "cpu_vendor", lambda: "AuthenticAMD")
    model = load_model(tiny.save(tmp_path)).model
    compiled = compile_model(model, CompilationConfig(level=2, use_inductor=False, cpu_decode_graph=True))
    counts = _count_onednn_linears(monkeypatch)
    want = tiny.run_steps(model)
    pointwise, calls = torch.ops.mkldnn._linear_pointwise, []
    monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise", lambda *a: calls.append(a[0].shape) or pointwise(*a))
    kernel_calls = cpu_linear.calls
    assert cpu_linear.load(default_cache_dir(), [torch.float32])
    dispatch.set_linear_max_rows(1)
    try:
        got = tiny.run_steps(model, compiled)
    finally:
        dispatch.set_linear_max_rows(cpu_linear.MAX_ROWS)
    linears = 4 * tiny.CONFIG.num_hidden_layers
    assert counts == {"general": [0], "decode": [linears]}
    # packed products: the LM head of the steps of 16, 2 (through cpu_linear's op, past the lowered
    # row bound) and 3 rows, every linear of the decode step of 2 sequences; on the kernel: the
    # decode step of 1 sequence and its LM head
    assert len(calls) == 3 + linears and cpu_linear.calls - kernel_calls == linears + 1
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=0, atol=1e-5)


def test_level_2_decode_graph_runs_a_tied_head_of_few_rows_on_the_kernel(tmp_path):
    """compute_logits of a tied head (the embedding's weight, as SmolLM2's) over 1 and 2 rows runs
    cpu_linear's kernel once a call with the decode graph on; over 4 rows (fp32) only on an x86 CPU
    with AVX2 or AVX-512 (the wide kernel), over 3 and MAX_ROWS + 1 rows never; the logits equal the wrapped model's
    own, a NaN row's too, on strided rows."""
    config = tiny.CONFIG.to_dict() | {"tie_word_embeddings": True}
    save_tiny(type(tiny.CONFIG).from_dict(config), tmp_path, randomize_norms=True)
    model = load_model(str(tmp_path)).model
    assert model.lm_head is None and model.head_weight is model.model.embed_tokens.weight
    compiled = compile_model(model, CompilationConfig(level=2, use_inductor=False, cpu_decode_graph=True))
    hidden = torch.randn(cpu_linear.MAX_ROWS + 1, tiny.CONFIG.hidden_size + 16)[:, :tiny.CONFIG.hidden_size]
    hidden[1, 5] = float("nan")
    wide = int(cpu_linear.WIDE_MIN_ROWS <= 4 <= cpu_linear.wide_rows())
    for rows, on_kernel in ((1, 1), (2, 1), (3, 0), (4, wide), (cpu_linear.MAX_ROWS + 1, 0)):
        calls = cpu_linear.calls
        got = compiled.compute_logits(hidden[:rows])
        assert cpu_linear.calls - calls == on_kernel, rows
        torch.testing.assert_close(got, model.compute_logits(hidden[:rows]), rtol=1e-5, atol=1e-5, equal_nan=True)


def test_level_2_decode_graph_retraces_for_other_cache_shapes(tmp_path):
    """The decode graph has the cache shapes baked in and keeps its guards: caches reallocated with
    the same shapes reuse it, another block count retraces it; logits equal eager's on each run's
    fresh caches."""
    model = load_model(tiny.save(tmp_path)).model
    compiled = compile_model(model, CompilationConfig(level=2, use_inductor=False, cpu_decode_graph=True))
    # run_steps has 2 decode steps: of 2 sequences, then of 1
    for blocks_per_seq, compiles, guarded in ((4, 1, 2), (4, 1, 2), (6, 2, 4)):
        want = tiny.run_steps(model, blocks_per_seq=blocks_per_seq)
        got = tiny.run_steps(model, compiled, blocks_per_seq=blocks_per_seq)
        assert compiled.decode_backend.num_compiles == compiles
        # the run on fresh caches of the same shapes called the bytecode straight, on them
        assert compiled.decode_calls["guarded"] == guarded
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=0, atol=1e-5)
    caches = [t for attn in model.attention_layers() for t in vars(attn).values() if isinstance(t, torch.Tensor)]
    assert caches and not any(hasattr(cache, "_dynamo_static_indices") for cache in caches)


def test_level_2_decode_graph_is_opt_in(tiny_dir):
    llm, _ = _generate(tiny_dir, {"level": 2, "use_inductor": False}, max_tokens=[3])
    assert llm.engine.model.decode_backend is None and "decode graph" not in llm.engine.model.describe()


def test_level_1_runs_dynamo_as_is(tiny_dir, eager_tokens):
    llm, tokens = _generate(tiny_dir, {"level": 1, "use_inductor": False})
    # Dynamo's defaults: shapes and ints first seen static recompile as they change (5 measured)
    assert llm.engine.model.backend.num_compiles >= 1
    assert tokens == eager_tokens


@pytest.mark.slow  # Inductor compiles the tiny model in tens of seconds on this CPU
def test_level_2_with_inductor(tiny_dir, eager_tokens, monkeypatch):
    """CPU level 2 as shipped, with the decode graph: the ops' references inside the graphs, compiled
    by Inductor. One compile of the general graph: the first step has many tokens, and no lowering
    may specialize on the token count (a size-1 step runs the same graph). The decode graph keeps
    its guards: its first step has 4 sequences, its last 1. The weights are packed for oneDNN (the
    size bound lowered), so the decode graph traces onednn_linear calls, whose packed weights are
    graph inputs; Inductor compiles it around their cpu_linear replacements, which run the C++
    kernel once per linear and step of the sequences it takes (below), as the C++
    attention kernel (ascendtile/cpu/decode_attention.py) runs once per layer and step. The general
    graph's rope, KV write and attention are C++ ops of any batch (ascendtile/cpu/rotary_embedding.py,
    reshape_and_cache_flash.py, unified_attention.py): once each per layer and step that is not a
    decode step. The LM head of a
    step that samples as many sequences runs the kernel too: 1 or 2, and on an x86 CPU with
    AVX2 or AVX-512 (fp32 products of 4 to 64 rows in the wide kernel) 4; 3 never."""
    monkeypatch.setattr(linear_module, "ONEDNN_MIN_WEIGHT_ELEMENTS", 0)
    counts = _count_onednn_linears(monkeypatch)
    kernel_calls, linear_calls = cpu_decode_attention.calls, cpu_linear.calls
    general_calls = cpu_unified_attention.calls, cpu_rotary_embedding.calls, cpu_reshape_and_cache_flash.calls
    batches, run_decode = [], CompiledModel._run_decode
    monkeypatch.setattr(CompiledModel, "_run_decode",
                        lambda model, ids, *args: batches.append(ids.shape[0]) or run_decode(model, ids, *args))
    heads, compute_logits = [], CompiledModel.compute_logits
    monkeypatch.setattr(CompiledModel, "compute_logits",
                        lambda model, hidden: heads.append(hidden.shape[0]) or compute_logits(model, hidden))
    llm, tokens = _generate(tiny_dir, {"level": 2, "cpu_decode_graph": True})
    assert counts == {"general": [0], "decode": [4 * tiny.CONFIG.num_hidden_layers] * 2}
    assert llm.engine.model.backend.num_compiles == 1
    # the decode graph: Inductor's lowering guards on a batch of one, so one compile serves the
    # batches of 4 to 2 and one the batch of 1; no `ascend` op in either
    decode = llm.engine.model.decode_backend
    assert decode.num_compiles == 2 and decode.opaque_ops == [[], []]
    # only each batch size's first step went through Dynamo; the rest ran the bytecode it compiled
    calls = llm.engine.model.decode_calls
    assert calls["guarded"] == 2 and calls["direct"] >= 60
    steps = calls["guarded"] + calls["direct"]
    assert cpu_decode_attention.calls - kernel_calls == tiny.CONFIG.num_hidden_layers * steps
    on_kernel = lambda rows: rows <= cpu_linear.FEW_ROWS or cpu_linear.WIDE_MIN_ROWS <= rows <= cpu_linear.wide_rows()  # noqa: E731
    few = sum(map(on_kernel, batches))
    assert len(batches) == steps and 0 < few < steps
    few_heads = sum(map(on_kernel, heads))
    assert 0 < few_heads < len(heads)
    assert cpu_linear.calls - linear_calls == 4 * tiny.CONFIG.num_hidden_layers * few + few_heads
    general = llm.last_stats.num_steps - steps
    assert general > 0
    assert (cpu_unified_attention.calls - general_calls[0], cpu_rotary_embedding.calls - general_calls[1],
            cpu_reshape_and_cache_flash.calls - general_calls[2]) == (tiny.CONFIG.num_hidden_layers * general,) * 3
    assert tokens == eager_tokens


@pytest.mark.skipif(not cpu_linear.tiles_served(), reason="no AMX: a bf16 decode graph has no tile kernel")
@pytest.mark.slow  # two bf16 LLMs at level 2 with the decode graph
def test_bf16_decode_graph_on_amx_multiplies_on_tiles(tiny_dir, monkeypatch):
    """On an AMX CPU the bf16 decode graph's linears and the LM head multiply batches of 3 and 4 over
    the weights' tiles (the tile kernel's counter: every linear and the head each such step),
    its later steps called without guards, and give the tokens and logprobs of the same graph
    without tiles (oneDNN's packed products), whose packs hold none. (The size bound lowered so
    that the tiny model's weights pack.)"""
    monkeypatch.setattr(linear_module, "ONEDNN_MIN_WEIGHT_ELEMENTS", 0)

    def generate():
        llm = LLM(tiny_dir, dtype=torch.bfloat16, max_model_len=256, max_num_seqs=4, num_kv_blocks=64,
                  compilation_config={"level": 2, "cpu_decode_graph": True})
        params = [SamplingParams(temperature=0, max_tokens=n, ignore_eos=True, logprobs=1) for n in MAX_TOKENS]
        tiled = cpu_linear.tiled_calls
        outputs = [o.outputs[0] for o in llm.generate(PROMPTS, params, use_tqdm=False)]
        return llm, outputs, cpu_linear.tiled_calls - tiled

    tiles, got, tiled_calls = generate()
    monkeypatch.setattr(cpu_linear, "tiles_served", lambda: False)
    plain, want, plain_tiled_calls = generate()
    # at least one decode step of 3 or more sequences: its 4 linears a layer and the head
    assert tiled_calls > 4 * tiny.CONFIG.num_hidden_layers and plain_tiled_calls == 0
    linears = [m for m in tiles.engine.model.model.modules() if isinstance(m, linear_module.Linear)]
    assert all(m.packed.tiles is not None for m in linears)
    plain_linears = [m for m in plain.engine.model.model.modules() if isinstance(m, linear_module.Linear)]
    assert all(m.packed.tiles is None for m in plain_linears)
    assert tiles.engine.model.decode_calls["direct"] >= 60
    for a, b in zip(got, want):
        assert a.token_ids == b.token_ids
        for step_a, step_b, token in zip(a.logprobs, b.logprobs, a.token_ids):
            assert step_a[token] == pytest.approx(step_b[token], abs=1e-3)


@pytest.mark.skipif(not build.amx_flags(), reason="no AMX: the prefill attention multiplies on vectors")
@pytest.mark.slow  # two bf16 LLMs at level 2
def test_bf16_prefill_attention_on_amx_tiles_gives_the_vector_kernels_tokens(tmp_path, monkeypatch):
    """On an AMX CPU the general graph's attention of a bf16 Llama with heads of 32 runs on AMX tiles
    (their counter), over prompts of more than a tile of 32 tokens and a chunk of 64 keys, and gives
    the tokens and logprobs of the 256-bit kernel (its library built without AMX)."""
    config = tiny.CONFIG.to_dict() | {"hidden_size": 128, "head_dim": 32}  # 4 heads of 32
    model_dir = tmp_path / "heads32"
    save_tiny(type(tiny.CONFIG).from_dict(config), model_dir, randomize_norms=True)
    prompts = [[(7 * i + 3) % 120 + 2 for i in range(n)] for n in (70, 40, 5)]

    def generate():
        llm = LLM(str(model_dir), dtype=torch.bfloat16, max_model_len=256, max_num_seqs=4, num_kv_blocks=64,
                  compilation_config={"level": 2, "cache_dir": str(tmp_path / "cache")})
        params = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True, logprobs=1)
        return [o.outputs[0] for o in llm.generate(prompts, params, use_tqdm=False)]

    tiled = cpu_unified_attention.tiled_calls
    got = generate()
    assert cpu_unified_attention.tiled_calls > tiled
    variant = (torch.bfloat16, 32)
    kernel = cpu_unified_attention._kernels[variant]
    monkeypatch.setattr(cpu_unified_attention.build, "amx_flags", lambda: ())
    monkeypatch.setattr(cpu_unified_attention, "_kernels", {})
    try:
        tiled = cpu_unified_attention.tiled_calls
        want = generate()
        assert cpu_unified_attention.tiled_calls == tiled
    finally:  # the op's table back to this process's tiled kernel
        dispatch.register("cpu_unified_attention", variant, kernel)
    for a, b in zip(got, want):
        assert a.token_ids == b.token_ids
        for step_a, step_b, token in zip(a.logprobs, b.logprobs, a.token_ids):
            # bf16 logits: an ulp at |logit| ~4 is 0.03 (seen: at most 0.004)
            assert step_a[token] == pytest.approx(step_b[token], abs=0.01)
