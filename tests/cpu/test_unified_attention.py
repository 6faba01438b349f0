"""The CPU unified attention kernel (ascendtile/cpu/unified_attention.py), built into this session's
cache: against the independent fp64 formula and unified_attention's reference, over mixed batches
(prefills, chunks after a context, decode rows, an empty sequence) longer than a tile of tokens
and a chunk of keys, NaN-poisoned unused slots, bad block ids, strided queries and outputs, a column
slice of the block table, windows and softcaps; NaN and infinite scores; bad inputs; opcheck; the
general graph's attention retargeted where the kernel serves and builds."""
import pytest
import torch
from torch import fx

from ascendtile.compilation.config import default_cache_dir
from ascendtile.compilation.decompose import decompose_to_references
from ascendtile.cpu import build, dispatch
from ascendtile.cpu import unified_attention as cua
from ascendtile.cpu.build import DTYPES
from ascendtile.cpu.paged_operands import HEAD_DIMS
from ascendtile.cpu.unified_attention_source import CHUNK_KEYS, TILE_TOKENS
from ascendtile.ops.reference.attention_unified import unified_attention
from ops._attention import corrupt_table, make_paged_batch, paged_formula
from tolerances import TOLERANCES

# one worker builds the 21 variants (~12 s on an AVX2 EPYC) and runs the module
pytestmark = pytest.mark.xdist_group("cpu_unified_attention")


@pytest.fixture(scope="module", autouse=True)
def kernel():
    assert cua.load(default_cache_dir(), [(dtype, dim) for dtype in DTYPES for dim in HEAD_DIMS])


def _run(out, query, kc, vc, table, cu, seqused, scale=0.2, softcap=0.0, window=0):
    calls = cua.calls
    torch.ops.ascendtile.cpu_unified_attention(out, query, kc, vc, table, cu, seqused, scale, softcap, window)
    assert cua.calls == calls + 1


def _strided(query, extra_heads=3):
    """query as a head slice of a wider tensor (row stride past its heads)."""
    wide = torch.randn(query.shape[0], query.shape[1] + extra_heads, query.shape[2]).to(query.dtype)
    wide[:, :query.shape[1]] = query
    return wide[:, :query.shape[1]]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("q_lens, kv_lens, heads, kv_heads, dim, block_size, softcap, window", [
    ([70, 1, 5, 0, 3], [70, 17, 140, 9, 3], 9, 3, 64, 16, 0.0, 0),  # SmolLM2's heads: prefill, decode, chunk
    ([40, 2], [40, 80], 8, 1, 256, 16, 0.0, 7),  # Gemma 3's head dim, a sliding window
    ([12, 20, 3], [12, 70, 3], 6, 2, 80, 8, 30.0, 0),  # softcap; blocks of 8
    ([100], [100], 4, 4, 128, 32, 0.0, 50),
    ([7, 23], [7, 30], 2, 1, 16, 4, 0.0, 3),
    ([33, 5], [100, 60], 6, 3, 32, 16, 50.0, 20),  # softcap and window on a head dim AMX tiles take
])
def test_matches_independent_formula_and_reference(dtype, q_lens, kv_lens, heads, kv_heads, dim, block_size, softcap,
                                                   window):
    if dim == 64:  # SmolLM2's case spans several tiles of tokens and chunks of keys
        assert max(q_lens) > TILE_TOKENS and max(kv_lens) > 2 * CHUNK_KEYS
    query, kc, vc, table, cu, seqused = make_paged_batch(q_lens, kv_lens, heads, kv_heads, dim, block_size, dtype)
    bad = corrupt_table(table, kv_lens, block_size, kc.shape[0])  # bad ids in every sequence with keys
    wide = torch.full((bad.shape[0], bad.shape[1] + 2), 3, dtype=torch.int32)  # a column slice of a wider table
    wide[:, :bad.shape[1]] = bad
    table, query = wide[:, :bad.shape[1]], _strided(query)
    out = torch.full((query.shape[0], heads + 1, dim), float("nan"), dtype=dtype)[:, 1:]
    _run(out, query, kc, vc, table, cu, seqused, 0.2, softcap, window)
    expect = paged_formula(query, kc, vc, table, q_lens, kv_lens, 0.2, softcap, window)
    torch.testing.assert_close(out.double(), expect, **TOLERANCES[dtype])
    ref = torch.empty_like(out)
    unified_attention(ref, query, kc, vc, table, cu, seqused, max(q_lens), max(kv_lens), 0.2, softcap, window)
    torch.testing.assert_close(out, ref, **TOLERANCES[dtype])


def test_queries_past_their_keys_and_empty_sequences_give_zeros():
    """A sequence with more new tokens than keys (its first rows see no key), and one with none."""
    query, kc, vc, table, cu, seqused = make_paged_batch([6, 4], [4, 9], 4, 2, 32, 16)
    out = torch.full_like(query, float("nan"))
    _run(out, query, kc, vc, table, cu, seqused)
    assert out[:2].eq(0).all() and out[2:].isfinite().all() and out[2:6].ne(0).all()
    expect = paged_formula(query[2:], kc, vc, table, [4, 4], [4, 9], 0.2)
    torch.testing.assert_close(out[2:].double(), expect, rtol=1e-5, atol=1e-5)
    empty = torch.empty(0, 4, 32)
    _run(empty, empty, kc, vc, table[:0], torch.zeros(1, dtype=torch.int32), seqused[:0])


def test_nan_and_infinite_scores_give_zeros():
    query, kc, vc, table, cu, seqused = make_paged_batch([3, 3, 2], [10, 10, 10], 4, 2, 64, 16)
    query[0, 1, 5] = float("nan")  # token 0, query head 1: every score NaN
    query[3:6, :2, 0] = 1.0
    kc.view(-1, 2, 64)[table[1, 0].long() * 16 + 3, 0, 0] = float("inf")  # KV head 0 of sequence 1: a +inf score
    out = torch.empty_like(query)
    _run(out, query, kc, vc, table, cu, seqused)
    assert out[0, 1].eq(0).all() and out[3:6, :2].eq(0).all()
    assert out[0, [0, 2, 3]].ne(0).all() and out[1:3].isfinite().all() and out[3:6, 2:].isfinite().all()
    assert out[6:].isfinite().all()


def test_a_nan_value_reaches_only_the_rows_that_see_it():
    """A NaN in the value of key 40 of a 70-token prefill: the rows of tokens 40 on in its KV head's
    query heads are NaN, every other row is the formula's (on AMX tiles, the chunk's values take the
    exact path: a tile's 32-key product would give the earlier rows 0 * NaN)."""
    query, kc, vc, table, cu, seqused = make_paged_batch([70], [70], 9, 3, 64, 16, torch.bfloat16)
    slot = table[0, 40 // 16].long() * 16 + 40 % 16
    vc.view(-1, 3, 64)[slot, 0] = float("nan")
    out = torch.empty_like(query)
    _run(out, query, kc, vc, table, cu, seqused)
    assert out[40:, :3].isnan().all() and not out[:40].isnan().any() and not out[:, 3:].isnan().any()
    vc.view(-1, 3, 64)[slot, 0] = 0.0
    expect = paged_formula(query, kc, vc, table, [70], [70], 0.2)
    expect[40:, :3] = float("nan")
    torch.testing.assert_close(out.double(), expect, equal_nan=True, **TOLERANCES[torch.bfloat16])


def test_bf16_is_the_fp32_kernel_rounded():
    """bf16 rows (on AMX tiles where the CPU has them) give what the fp32 kernel gives on the same
    rows widened, rounded to bf16, but for the order of fp32 sums: 0.14 % of elements differed on
    tiles. Probabilities rounded once to bf16 for the values' product had 28 % differ."""
    query, kc, vc, table, cu, seqused = make_paged_batch([70, 1, 5, 0, 3], [70, 17, 140, 9, 3], 9, 3, 64, 16,
                                                         torch.bfloat16)
    out, wide = torch.empty_like(query), torch.empty(query.shape)
    _run(out, query, kc, vc, table, cu, seqused)
    _run(wide, query.float(), kc.float(), vc.float(), table, cu, seqused)
    assert out.ne(wide.to(torch.bfloat16)).float().mean() < 0.01


@pytest.mark.parametrize("dtype, dim, tiled", [
    (torch.bfloat16, 64, True), (torch.bfloat16, 256, True), (torch.bfloat16, 80, False),
    (torch.bfloat16, 16, False), (torch.float32, 64, False), (torch.float16, 64, False)])
def test_bf16_multiplies_on_amx_tiles_where_the_cpu_has_them(dtype, dim, tiled):
    """bf16 with a head dim of whole 32-element tile rows runs on AMX tiles where the library is
    built for them (build.amx_flags: an AMX CPU); every other variant, and any CPU without AMX, on
    vectors."""
    query, kc, vc, table, cu, seqused = make_paged_batch([40], [40], 4, 2, dim, 16, dtype)
    before = cua.tiled_calls
    _run(torch.empty_like(query), query, kc, vc, table, cu, seqused)
    assert cua.tiled_calls - before == int(tiled and build.amx_flags() != ())


@pytest.mark.parametrize("change, match", [
    (lambda a: {**a, "value_cache": a["value_cache"].double()}, "^value_cache: dtype torch.float64"),
    (lambda a: {**a, "block_table": a["block_table"].long()}, "^block_table: int32, 2 rows"),
    (lambda a: {**a, "seqused_k": a["seqused_k"].long()}, "^seqused_k: int32"),
    (lambda a: {**a, "cu_seqlens_q": a["cu_seqlens_q"][:2]}, "^cu_seqlens_q: int32, 3 rows"),
    (lambda a: {**a, "cu_seqlens_q": torch.tensor([0, 5, 8], dtype=torch.int32)}, "^cu_seqlens_q: must start at 0"),
    (lambda a: {**a, "cu_seqlens_q": torch.tensor([0, 7, 6], dtype=torch.int32)}, "^cu_seqlens_q: must start at 0"),
    (lambda a: {**a, "cu_seqlens_q": torch.tensor([1, 3, 6], dtype=torch.int32)}, "^cu_seqlens_q: must start at 0"),
    (lambda a: {**a, "query": a["query"][..., :24], "out": a["out"][..., :24]}, "^query / key_cache: no kernel"),
    (lambda a: {**a, "query": a["query"].double(), "out": a["out"].double()}, "^query / key_cache: no kernel for torch.float64"),
    (lambda a: {**a, "key_cache": a["key_cache"].transpose(2, 3).contiguous().transpose(2, 3),
                "value_cache": a["value_cache"].transpose(2, 3).contiguous().transpose(2, 3)},
     "^key_cache: the last dim must be contiguous"),
    (lambda a: {**a, "out": a["out"][:1]}, "^out / value_cache: shapes"),
])
def test_bad_inputs_name_the_argument(change, match):
    query, kc, vc, table, cu, seqused = make_paged_batch([2, 4], [5, 9], 4, 2, 64, 16)
    args = dict(out=torch.empty_like(query), query=query, key_cache=kc, value_cache=vc, block_table=table,
                cu_seqlens_q=cu, seqused_k=seqused)
    with pytest.raises(ValueError, match=match):
        torch.ops.ascendtile.cpu_unified_attention(**change(args), scale=0.2, softcap=0.0, sliding_window=0)


def test_not_loaded_says_so():
    """A variant taken out of the op's table (dispatch.register with None) is named as not loaded;
    another head dim still runs."""
    query, kc, vc, table, cu, seqused = make_paged_batch([2], [5], 4, 2, 64, 16)
    dispatch.register("cpu_unified_attention", (torch.float32, 64), None)
    try:
        with pytest.raises(RuntimeError, match="^cpu_unified_attention: the kernel is not loaded for torch.float32 and head dim 64"):
            torch.ops.ascendtile.cpu_unified_attention(torch.empty_like(query), query, kc, vc, table, cu, seqused, 0.2,
                                                       0.0, 0)
        query, kc, vc, table, cu, seqused = make_paged_batch([2], [5], 4, 2, 32, 16)  # another head dim: loaded
        torch.ops.ascendtile.cpu_unified_attention(torch.empty_like(query), query, kc, vc, table, cu, seqused, 0.2, 0.0, 0)
    finally:
        dispatch.register("cpu_unified_attention", (torch.float32, 64), cua._kernels[torch.float32, 64])
    with pytest.raises(ValueError, match=r"^variants: no kernel for the head dims \[24\]"):
        cua.load(default_cache_dir(), [(torch.float32, 24)])


def test_fake_impl_and_schema():
    query, kc, vc, table, cu, seqused = make_paged_batch([3, 1], [3, 9], 4, 2, 32, 16)
    kc, vc = kc.nan_to_num(), vc.nan_to_num()  # opcheck compares whole tensors
    torch.library.opcheck(torch.ops.ascendtile.cpu_unified_attention.default,
                          (torch.zeros_like(query), query, kc, vc, table, cu, seqused, 0.2, 0.0, 0),
                          test_utils=("test_schema", "test_faketensor"))


def _attention_graph(args: dict, kv_cache_dtype: str) -> fx.GraphModule:
    """One ascend::unified_attention call over placeholders carrying args as example values."""
    graph = fx.Graph()
    nodes = {}
    for name, value in args.items():
        nodes[name] = graph.placeholder(name)
        nodes[name].meta["example_value"] = value
    graph.call_function(torch.ops.ascend.unified_attention.default,
                        (*nodes.values(), 20, 40, 0.2, 0.0, 0, kv_cache_dtype))
    graph.output(nodes["out"])
    return fx.GraphModule(torch.nn.Module(), graph)


def test_general_graph_attention_becomes_the_kernel_where_it_serves(tmp_path, monkeypatch):
    """The general graph's attention over float caches is retargeted (the decode graph's keeps its
    own forms); an int8 cache, an unserved head dim and a failed build leave the op."""
    query, kc, vc, table, cu, seqused = make_paged_batch([20, 1], [20, 40], 4, 2, 32, 16)
    args = dict(out=torch.empty_like(query), query=query, key_cache=kc, value_cache=vc, block_table=table,
                cu_seqlens_q=cu, seqused_k=seqused)
    gm = _attention_graph(args, "auto")
    assert decompose_to_references(gm, decode=False, cache_dir=default_cache_dir()) == 1
    assert [n.target for n in gm.graph.nodes if n.op == "call_function"] == [cua.unified_attention_cpu]
    calls = cua.calls
    got = gm(*args.values())
    assert cua.calls == calls + 1
    torch.testing.assert_close(got.double(), paged_formula(query, kc, vc, table, [20, 1], [20, 40], 0.2),
                               rtol=1e-5, atol=1e-5)
    assert decompose_to_references(_attention_graph(args, "int8"), decode=False, cache_dir=default_cache_dir()) == 0
    odd = {**args, "query": torch.empty(21, 4, 24), "out": torch.empty(21, 4, 24),
           "key_cache": kc[..., :24], "value_cache": vc[..., :24]}
    assert decompose_to_references(_attention_graph(odd, "auto"), decode=False, cache_dir=default_cache_dir()) == 0
    monkeypatch.setattr(cua, "_kernels", {})  # as a process that loaded none: a compile builds its one variant
    assert decompose_to_references(_attention_graph(args, "auto"), decode=False, cache_dir=str(tmp_path)) == 1
    assert list(cua._kernels) == [(torch.float32, 32)]
    assert len(list((tmp_path / "cpu").glob("unified_attention-*.so"))) == 1
    monkeypatch.setattr(cua, "_kernels", {})
    monkeypatch.setenv("CXX", "false")  # a compiler that fails
    with pytest.warns(RuntimeWarning, match="building unified_attention failed"):
        assert decompose_to_references(_attention_graph(args, "auto"), decode=False, cache_dir=str(tmp_path / "b")) == 0
