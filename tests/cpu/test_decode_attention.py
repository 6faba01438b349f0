"""The CPU decode attention kernel (ascendtile/cpu/decode_attention.py), built into this session's
cache: against the independent fp64 formula and the traceable form it replaces in CPU level 2's
decode graph, over NaN-poisoned unused slots, bad block ids, empty sequences, lengths that are no
multiple of 8 or of the block size, strided queries and outputs, a column slice of the block
table, windows and softcaps; NaN and infinite scores; bad inputs; the build cache; no compiler."""
import pytest
import torch

from ascendtile.compilation.config import default_cache_dir
from ascendtile.cpu import build, dispatch
from ascendtile.cpu import decode_attention as cda
from ascendtile.cpu.paged_operands import HEAD_DIMS
from ascendtile.ops.reference.attention_unified import unified_attention_decode_traceable
from ops._attention import corrupt_table, make_paged_batch, paged_formula
from tolerances import TOLERANCES

# one worker builds the 21 variants (~12 s on an AVX2 EPYC) and runs the module
pytestmark = pytest.mark.xdist_group("cpu_decode_attention")


@pytest.fixture(scope="module", autouse=True)
def kernel():
    assert cda.load(default_cache_dir(), [(dtype, dim) for dtype in build.DTYPES for dim in HEAD_DIMS])


def _run(out, query, kc, vc, table, seqused, max_k, scale=0.2, softcap=0.0, window=0):
    calls = cda.calls
    torch.ops.ascendtile.cpu_decode_attention(out, query, kc, vc, table, seqused, max_k, scale, softcap, window)
    assert cda.calls == calls + 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("kv_lens, heads, kv_heads, dim, block_size, softcap, window", [
    ([1, 17, 40, 0, 9], 9, 3, 64, 16, 0.0, 0),  # SmolLM2's heads
    ([33, 5], 8, 1, 256, 16, 0.0, 7),  # Gemma 3's head dim, a sliding window
    ([12, 70, 3], 6, 2, 80, 8, 30.0, 0),  # softcap; blocks of 8
    ([100], 4, 4, 128, 32, 0.0, 0),
    ([7, 23], 2, 1, 16, 4, 0.0, 3),
])
def test_matches_independent_formula_and_traceable_form(dtype, kv_lens, heads, kv_heads, dim, block_size, softcap,
                                                        window):
    q_lens = [1] * len(kv_lens)
    query, kc, vc, table, _, seqused = make_paged_batch(q_lens, kv_lens, heads, kv_heads, dim, block_size, dtype)
    bad = corrupt_table(table, kv_lens, block_size, kc.shape[0])  # bad ids in every sequence with keys
    strided = torch.randn(len(kv_lens), heads + 3, dim, dtype=dtype)
    strided[:, :heads] = query
    query = strided[:, :heads]
    wide = torch.full((bad.shape[0], bad.shape[1] + 2), 3, dtype=torch.int32)  # a column slice of a wider table
    wide[:, :bad.shape[1]] = bad
    table = wide[:, :bad.shape[1]]
    out = torch.full((len(kv_lens), heads + 1, dim), float("nan"), dtype=dtype)[:, 1:]
    max_k = table.shape[1] * block_size
    _run(out, query, kc, vc, table, seqused, max_k, 0.2, softcap, window)
    expect = paged_formula(query, kc, vc, table, q_lens, kv_lens, 0.2, softcap, window)
    torch.testing.assert_close(out.double(), expect, **TOLERANCES[dtype])
    form = torch.empty_like(out)
    unified_attention_decode_traceable(form, query, kc, vc, table, torch.arange(len(kv_lens) + 1, dtype=torch.int32),
                                       seqused, 1, max_k, 0.2, softcap, window)
    torch.testing.assert_close(out, form, **TOLERANCES[dtype])


@pytest.mark.parametrize("dtype, dim, dot", [
    (torch.bfloat16, 64, True), (torch.bfloat16, 96, True), (torch.bfloat16, 32, True),
    (torch.bfloat16, 80, False), (torch.bfloat16, 16, False), (torch.float32, 64, False), (torch.float16, 64, False),
])
def test_bf16_scores_are_dot_products_where_the_cpu_has_them(dtype, dim, dot):
    """bf16 rows of whole 32-element chunks score with AVX-512 BF16 dot products where the CPU has
    them (dot_calls counts those launches); either way the results are the formula's up to fp32
    sums and the output's rounding (a 1 % error in the scores' scale fails this)."""
    kv_lens = [37, 20, 1, 9]
    query, kc, vc, table, _, seqused = make_paged_batch([1] * 4, kv_lens, 6, 2, dim, 16, dtype)
    out, dots = torch.empty_like(query), cda.dot_calls
    _run(out, query, kc, vc, table, seqused, table.shape[1] * 16, 1.0)
    assert cda.dot_calls - dots == int(dot and build.avx512_bf16_flags() == build.AVX512_BF16_FLAGS)
    expect = paged_formula(query, kc, vc, table, [1] * 4, kv_lens, 1.0)
    rounding = {torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 4e-3}[dtype]
    torch.testing.assert_close(out.double(), expect, rtol=rounding, atol=rounding)


def test_the_256_bit_build_matches_the_formula(tmp_path):
    """On a CPU with AVX-512 the library takes 512-bit vectors (and bf16 dot products where it has
    them); the build without those flags, the one an AVX2-only CPU gets, is checked here too."""
    if build.avx512_bf16_flags() == ():
        pytest.skip("this CPU's build is the 256-bit one: the other tests check it")
    variants = [(dtype, dim) for dtype in build.DTYPES for dim in (64, 80)]
    kernels = {}
    assert build.load_variants("decode_attention", cda.SOURCE, str(tmp_path), cda._ARGTYPES, variants, kernels)
    kv_lens = [37, 20, 1, 9]
    try:
        for variant in variants:
            dispatch.register("cpu_decode_attention", variant, kernels[variant])
            query, kc, vc, table, _, seqused = make_paged_batch([1] * 4, kv_lens, 6, 2, variant[1], 16, variant[0])
            out, dots = torch.full_like(query, float("nan")), cda.dot_calls
            _run(out, query, kc, vc, table, seqused, table.shape[1] * 16, 0.2, 20.0)
            assert cda.dot_calls == dots
            expect = paged_formula(query, kc, vc, table, [1] * 4, kv_lens, 0.2, 20.0)
            torch.testing.assert_close(out.double(), expect, **TOLERANCES[variant[0]])
    finally:
        for variant in variants:
            dispatch.register("cpu_decode_attention", variant, cda._kernels[variant])


def test_max_seqlen_k_bounds_the_keys_as_in_the_traceable_form():
    """Keys past max_seqlen_k (rounded up to a block) are not read, as the form's gather stops there."""
    query, kc, vc, table, cu, seqused = make_paged_batch([1, 1], [40, 20], 4, 2, 64, 16)
    out, form = torch.empty_like(query), torch.empty_like(query)
    _run(out, query, kc, vc, table, seqused, 20)
    unified_attention_decode_traceable(form, query, kc, vc, table, cu, seqused, 1, 20, 0.2, 0.0, 0)
    torch.testing.assert_close(out, form, rtol=1e-5, atol=1e-5)
    expect = paged_formula(query, kc, vc, table, [1, 1], [32, 20], 0.2)  # 40 keys, read up to 2 blocks
    torch.testing.assert_close(out.double(), expect, rtol=1e-5, atol=1e-5)


def test_nan_and_infinite_scores_give_zeros_as_the_traceable_form():
    query, kc, vc, table, cu, seqused = make_paged_batch([1, 1, 1], [10, 10, 10], 4, 2, 64, 16)
    query[0, 1, 5] = float("nan")  # query head 1 of sequence 0: every score NaN
    query[1, :2, 0] = 1.0
    kc.view(-1, 2, 64)[table[1, 0].long() * 16 + 3, 0, 0] = float("inf")  # KV head 0 of sequence 1: a +inf score
    out, form = torch.empty_like(query), torch.empty_like(query)
    _run(out, query, kc, vc, table, seqused, 10)
    unified_attention_decode_traceable(form, query, kc, vc, table, cu, seqused, 1, 10, 0.2, 0.0, 0)
    assert out[0, 1].eq(0).all() and out[1, :2].eq(0).all()
    assert out[0, [0, 2, 3]].ne(0).all() and out[1, 2:].isfinite().all() and out[2].isfinite().all()
    torch.testing.assert_close(out, form, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("change, match", [
    (lambda a: {**a, "value_cache": a["value_cache"].double()}, "^value_cache: dtype torch.float64"),
    (lambda a: {**a, "block_table": a["block_table"].long()}, "^block_table: int32"),
    (lambda a: {**a, "seqused_k": a["seqused_k"][:1]}, "^seqused_k: int32 with one row per query row"),
    (lambda a: {**a, "query": a["query"][..., :24], "out": a["out"][..., :24]}, "^query / key_cache: no kernel"),
    (lambda a: {**a, "query": a["query"][..., :32], "out": a["out"][..., :32]}, "^query / key_cache: no kernel"),
    (lambda a: {**a, "query": a["query"].double(), "out": a["out"].double()}, "^query / key_cache: no kernel for torch.float64"),
    (lambda a: {**a, "key_cache": a["key_cache"].transpose(2, 3).contiguous().transpose(2, 3),
                "value_cache": a["value_cache"].transpose(2, 3).contiguous().transpose(2, 3)},
     "^key_cache: the last dim must be contiguous"),
    (lambda a: {**a, "out": a["out"][:1]}, "^out / value_cache: shapes"),
])
def test_bad_inputs_name_the_argument(change, match):
    query, kc, vc, table, _, seqused = make_paged_batch([1, 1], [5, 9], 4, 2, 64, 16)
    args = dict(out=torch.empty_like(query), query=query, key_cache=kc, value_cache=vc, block_table=table,
                seqused_k=seqused)
    with pytest.raises(ValueError, match=match):
        torch.ops.ascendtile.cpu_decode_attention(**change(args), max_seqlen_k=9, scale=0.2, softcap=0.0,
                                                  sliding_window=0)


def test_variants_are_built_when_asked_for_once_per_cache_dir(tmp_path, monkeypatch):
    """A library holds the variants asked for and not yet loaded; a second process (the lru cache
    cleared) reads the file back; another variant is a library of its own."""
    runs, kernels, where = build.compiler_runs, {}, str(tmp_path)
    load = lambda variants, into: build.load_variants("decode_attention", cda.SOURCE, where, cda._ARGTYPES, variants, into)
    assert load([(torch.float32, 16)], kernels) and list(kernels) == [(torch.float32, 16)]
    assert build.compiler_runs == runs + 1
    assert [p.suffix for p in (tmp_path / "cpu").iterdir()] == [".so"]  # the temporary build dir is gone
    assert load([(torch.float32, 16)], kernels) and build.compiler_runs == runs + 1  # loaded: nothing built
    build.load_library.cache_clear()  # as a fresh process: the file is read back, not rebuilt
    again = {}
    assert load([(torch.float32, 16)], again) and build.compiler_runs == runs + 1
    assert load([(torch.bfloat16, 16), (torch.float32, 16), (torch.bfloat16, 16)], again)
    assert list(again) == [(torch.float32, 16), (torch.bfloat16, 16)] and build.compiler_runs == runs + 2
    assert len(list((tmp_path / "cpu").iterdir())) == 2
    with pytest.raises(ValueError, match=r"^variants: no kernel for the dtypes \['torch.float64'\]"):
        load([(torch.float64, 16)], {})
    with pytest.raises(ValueError, match=r"^variants: no kernel for the head dims \[24, 48\]"):
        cda.load(where, [(torch.float32, 48), (torch.float32, 24), (torch.float32, 64)])
    path = build.library_path("decode_attention", cda.SOURCE, where)
    assert build.library_path("decode_attention", cda.SOURCE + " ", where) != path  # another source
    monkeypatch.setattr(build, "BASE_FLAGS", (*build.BASE_FLAGS, "-g"))  # other flags: another file too
    assert build.library_path("decode_attention", cda.SOURCE, where) != path


def test_not_loaded_says_so():
    """A variant taken out of the op's table (dispatch.register with None) is named as not loaded."""
    query, kc, vc, table, _, seqused = make_paged_batch([1, 1], [5, 9], 4, 2, 64, 16, torch.bfloat16)
    dispatch.register("cpu_decode_attention", (torch.bfloat16, 64), None)
    try:
        with pytest.raises(RuntimeError, match="^cpu_decode_attention: the kernel is not loaded for torch.bfloat16 and head dim 64"):
            torch.ops.ascendtile.cpu_decode_attention(torch.empty_like(query), query, kc, vc, table, seqused, 9, 0.2, 0.0, 0)
    finally:
        dispatch.register("cpu_decode_attention", (torch.bfloat16, 64), cda._kernels[torch.bfloat16, 64])


def test_without_a_compiler_the_reference_path_stays(tmp_path, monkeypatch):
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    with pytest.warns(RuntimeWarning, match="no C.. compiler"):
        assert build.load_library("decode_attention", cda.SOURCE, str(tmp_path)) is None
    monkeypatch.setenv("CXX", "false")  # a compiler that fails
    with pytest.warns(RuntimeWarning, match="building decode_attention failed"):
        assert build.load_library("decode_attention", cda.SOURCE, str(tmp_path / "other")) is None
