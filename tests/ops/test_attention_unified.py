"""unified_attention, the op contract: the reference vs an independent per-sequence fp64 formula,
opcheck and torch.compile on both kernel paths, the functional wrapper and bad inputs; over an
int8 cache (kv_cache_dtype "int8") the same formula over the dequantized cache, and the error
against the same attention over the float cache on both paths.
(Triton kernel vs reference numerics: tests/kernels/test_attention_unified.py.)"""
import pytest
import torch

import ascendtile.ops as ak
from opchecks import compiles, kernel_path, op_contract_tests
from ops._attention import dequantized, make_paged_batch, paged_formula, quantize_paged

OPS = torch.ops.ascend

CASES = [  # q_lens, kv_lens: decode, chunked prefill over context, prefill from scratch, empty sequence
    ([1, 1, 1], [1, 17, 40]),
    ([3, 1, 5, 1], [19, 33, 5, 0]),
    ([7, 2], [7, 2]),
]


@pytest.mark.parametrize("q_lens,kv_lens", CASES)
@pytest.mark.parametrize("heads,kv_heads,softcap,window", [(8, 8, 0.0, 0), (8, 2, 30.0, 0), (5, 1, 0.0, 4)])
def test_reference_matches_independent(q_lens, kv_lens, heads, kv_heads, softcap, window):
    query, kc, vc, table, cu, seqused = make_paged_batch(q_lens, kv_lens, heads, kv_heads, 32, 16)
    got = ak.unified_attention(query, kc, vc, table, cu, seqused, max(q_lens), max(kv_lens), 0.2, softcap, window)
    expect = paged_formula(query, kc, vc, table, q_lens, kv_lens, 0.2, softcap, window)
    assert not got.isnan().any()
    torch.testing.assert_close(got.double(), expect, rtol=1e-5, atol=1e-5)
    if 0 in kv_lens:
        b = kv_lens.index(0)
        assert (got[int(cu[b]):int(cu[b + 1])] == 0).all()


@pytest.mark.parametrize("q_lens,kv_lens,window,bad_block,causal_kernel", [
    ([7, 2, 30], [7, 2, 30], 0, False, True),  # prefill from scratch, padded to 30 rows
    ([7, 2, 30], [7, 2, 30], 0, True, False),  # a bad block id inside a sequence: its keys hidden
    ([7, 2, 30], [7, 2, 30], 4, False, False),  # a window that hides keys
    ([7, 2, 30], [7, 2, 30], 29, False, False),  # ... by one key: row 29 does not see key 0
    ([7, 2, 30], [7, 2, 30], 30, False, True),  # a window as long as every sequence hides none
    ([7, 2, 30], [9, 2, 30], 0, False, False),  # context before one sequence's queries
])
def test_fresh_prefill_takes_the_causal_kernel(monkeypatch, q_lens, kv_lens, window, bad_block, causal_kernel):
    """A prefill from scratch runs torch's fused attention with is_causal and no mask (the kernel
    skips hidden tiles); anything else that hides keys keeps the mask. Both match the formula
    (NaN in every unused cache slot). The reference's choice, so on a device too."""
    monkeypatch.setenv("ASCENDTILE_KERNELS", "reference")
    query, kc, vc, table, cu, seqused = make_paged_batch(q_lens, kv_lens, 8, 2, 32, 16)
    if bad_block:
        table[2, 1] = kc.shape[0] + 7  # keys 16..29 of the third sequence are hidden
    sdpa, calls = torch.nn.functional.scaled_dot_product_attention, []

    def spy(*args, **kwargs):
        calls.append((kwargs.get("is_causal", False), kwargs.get("attn_mask") is None))
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    got = ak.unified_attention(query, kc, vc, table, cu, seqused, max(q_lens), max(kv_lens), 0.2, 0.0, window)
    expect = paged_formula(query, kc, vc, table, q_lens, kv_lens, 0.2, 0.0, window)
    torch.testing.assert_close(got.double(), expect, rtol=1e-5, atol=1e-5)
    assert calls == [(causal_kernel, causal_kernel)]


def test_mixed_batch_long_context_reference():
    q_lens, kv_lens = [1, 129, 1, 40], [1000, 129, 255, 1040]
    query, kc, vc, table, cu, seqused = make_paged_batch(q_lens, kv_lens, 4, 1, 16, 64)
    got = ak.unified_attention(query, kc, vc, table, cu, seqused, 129, 1040, 0.25, 0.0, 300)
    expect = paged_formula(query, kc, vc, table, q_lens, kv_lens, 0.25, 0.0, 300)
    torch.testing.assert_close(got.double(), expect, rtol=1e-5, atol=1e-5)


def test_reference_half_precision_close():
    query, kc, vc, table, cu, seqused = make_paged_batch([2, 1], [20, 9], 4, 2, 64, 16, dtype=torch.bfloat16)
    got = ak.unified_attention(query, kc, vc, table, cu, seqused, 2, 20, 0.125)
    expect = paged_formula(query, kc, vc, table, [2, 1], [20, 9], 0.125)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.double(), expect, rtol=2e-2, atol=2e-2)


def _args():
    query, kc, vc, table, cu, seqused = make_paged_batch([3, 1], [19, 5], 4, 2, 16, 16)
    return [torch.empty_like(query), query, kc, vc, table, cu, seqused, 3, 19, 0.25, 10.0, 6]


def _int8_args():
    out, query, kc, vc, table, cu, seqused, *rest = _args()
    kq, vq, ks, vs = quantize_paged(kc, vc)
    return [out, query, kq, vq, table, cu, seqused, *rest, "int8", ks, vs]


test_opcheck, test_compile = op_contract_tests({"unified_attention": _args, "unified_attention:int8": _int8_args})


def test_wrapper_compiles():
    def step(query, kc, vc, table, cu, seqused):
        return ak.unified_attention(query, kc, vc, table, cu, seqused, 3, 19, 0.25, 10.0, 8).sum(-1)

    compiles(step, *_args()[1:7])


def test_bad_inputs(values_checked):
    out, query, kc, vc, table, cu, seqused, mq, mk, scale, cap, win = _args()
    op = OPS.unified_attention

    def call(**kw):
        args = dict(out=out, query=query, key_cache=kc, value_cache=vc, block_table=table, cu_seqlens_q=cu,
                    seqused_k=seqused, max_seqlen_q=mq, max_seqlen_k=mk, scale=scale, softcap=cap, sliding_window=win)
        args.update(kw)
        return op(*args.values())

    for name, exc, bad in [
        ("query", TypeError, dict(query=query.int())),
        ("query", TypeError, dict(query=query.double())),
        ("query", ValueError, dict(query=torch.randn(4, 16, 4).transpose(1, 2))),  # non-contiguous last dim
        ("out", ValueError, dict(out=torch.empty(4, 4, 8))),
        ("out", TypeError, dict(out=out.half())),
        ("key_cache", ValueError, dict(key_cache=torch.randn(kc.shape[0], 16, 3, 16), value_cache=torch.randn(kc.shape[0], 16, 3, 16))),
        ("value_cache", ValueError, dict(value_cache=vc[:, :, :1])),
        ("key_cache", ValueError, dict(key_cache=torch.randn(4, 8, 2, 16), value_cache=torch.randn(4, 8, 2, 16))),
        ("key_cache", TypeError, dict(key_cache=kc.half(), value_cache=vc.half())),
        ("block_table", TypeError, dict(block_table=table.long())),
        ("block_table", ValueError, dict(block_table=table[:1])),
        ("cu_seqlens_q", ValueError, dict(cu_seqlens_q=cu[:2])),
        ("max_seqlen_k", ValueError, dict(max_seqlen_k=table.shape[1] * 16 + 1)),  # longer than the table holds
        ("seqused_k", ValueError, dict(seqused_k=torch.tensor([19, table.shape[1] * 16 + 1], dtype=torch.int32))),
        ("max_seqlen_q", ValueError, dict(max_seqlen_q=5)),
        ("scale", ValueError, dict(scale=0.0)),
        ("softcap", ValueError, dict(softcap=-1.0)),
        ("seqused_k", ValueError, dict(seqused_k=seqused.to("meta"))),
    ]:
        with pytest.raises(exc, match=rf"^{name}\b"):
            call(**bad)


def test_bad_input_writes_nothing(triton_path):
    out, query, kc, vc, table, cu, seqused, mq, mk, scale, cap, win = _args()
    out.fill_(7.0)
    with pytest.raises(ValueError):
        OPS.unified_attention(out, query, kc, vc, table[:1], cu, seqused, mq, mk, scale, cap, win)
    assert (out == 7.0).all()


@pytest.mark.parametrize("path", ["reference", "triton"])
def test_check_indices_switch(path, monkeypatch):
    out, query, kc, vc, table, cu, seqused, mq, mk, scale, cap, win = _args()
    monkeypatch.setenv("ASCENDTILE_KERNELS", path)
    monkeypatch.setenv("ASCENDTILE_CHECK_INDICES", "1")
    wrong = table.clone()
    wrong[0, 0] = -3
    with pytest.raises(ValueError, match=rf"^block_table: entry \[0, 0\] is -3, outside \[0, {kc.shape[0]}\)"):
        OPS.unified_attention(out, query, kc, vc, wrong, cu, seqused, mq, mk, scale, cap, win)
    OPS.unified_attention(out, query, kc, vc, table, cu, seqused, mq, mk, scale, cap, win)


@pytest.mark.parametrize("q_lens,kv_lens", [([5, 5, 1, 3], [40, 6, 90, 3]), ([2, 4], [300, 9]), ([16, 1, 2], [16, 0, 2000])])
@pytest.mark.parametrize("heads,kv_heads,window", [(9, 3, 0), (4, 4, 5)])
def test_short_queries_take_the_shared_plan(q_lens, kv_lens, heads, kv_heads, window, monkeypatch, reference_path):
    """Speculative decoding's verify steps (1 to SHORT_QUERIES new tokens per sequence) attend through
    the decode step's gather plan: lengths far apart (two plan groups), an empty sequence (-> 0),
    GQA, a window, NaN in every unused slot; the path is counted, so the test sees it taken."""
    import ascendtile.ops.reference.attention_unified as reference

    taken = []
    short = reference.short_queries
    monkeypatch.setattr(reference, "short_queries", lambda *a: taken.append(short(*a)) or taken[-1])
    query, kc, vc, table, cu, seqused = make_paged_batch(q_lens, kv_lens, heads, kv_heads, 32, 16)
    got = ak.unified_attention(query, kc, vc, table, cu, seqused, max(q_lens), max(kv_lens), 0.2, 0.0, window)
    assert taken == [True]
    expect = paged_formula(query, kc, vc, table, q_lens, kv_lens, 0.2, 0.0, window)
    assert not got.isnan().any()
    torch.testing.assert_close(got.double(), expect, rtol=1e-5, atol=1e-5)


# Attention over the int8 cache vs over the float cache it was written from: max |Δ| for unit-variance
# queries, keys and values at scale D^-0.5 (measured on both paths, MHA / GQA, softcap, window, head
# sizes 64 and 128, contexts to 300: at most 0.030 for unified_attention, 0.018 for paged decode).
INT8_VS_FLOAT = 0.05


@pytest.mark.parametrize("q_lens,kv_lens", CASES[:2])
@pytest.mark.parametrize("heads,kv_heads,softcap,window", [(8, 8, 0.0, 0), (8, 2, 30.0, 0), (5, 1, 0.0, 4)])
def test_int8_reference_matches_independent(q_lens, kv_lens, heads, kv_heads, softcap, window):
    """The reference over the int8 cache equals the fp64 formula over the dequantized cache: the
    dequantization of the gathered rows is exact (NaN scales in unused slots, -1 table padding)."""
    query, kc, vc, table, cu, seqused = make_paged_batch(q_lens, kv_lens, heads, kv_heads, 32, 16)
    kq, vq, ks, vs = quantize_paged(kc, vc)
    got = ak.unified_attention(query, kq, vq, table, cu, seqused, max(q_lens), max(kv_lens), 0.2, softcap, window,
                               "int8", ks, vs)
    expect = paged_formula(query, dequantized(kq, ks), dequantized(vq, vs), table, q_lens, kv_lens, 0.2, softcap,
                           window)
    assert not got.isnan().any()
    torch.testing.assert_close(got.double(), expect, rtol=1e-5, atol=1e-5)


def test_int8_static_scales_match_independent():
    q_lens, kv_lens = [3, 1, 5], [19, 33, 5]
    query, kc, vc, table, cu, seqused = make_paged_batch(q_lens, kv_lens, 6, 3, 48, 16)
    scales = (torch.tensor([0.02, 0.03, 0.025]), torch.tensor(0.03))
    kq, vq, ks, vs = quantize_paged(kc, vc, scales)
    got = ak.unified_attention(query, kq, vq, table, cu, seqused, 5, 33, 0.15, 0.0, 9, "int8", ks, vs)
    expect = paged_formula(query, dequantized(kq, ks), dequantized(vq, vs), table, q_lens, kv_lens, 0.15, 0.0, 9)
    torch.testing.assert_close(got.double(), expect, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("path", ["reference", "triton"])
@pytest.mark.parametrize("heads,kv_heads,head_size,softcap,window", [(4, 4, 64, 0.0, 0), (8, 2, 32, 30.0, 0),
                                                                     (6, 3, 64, 0.0, 6)])
def test_int8_error_vs_float_cache(path, heads, kv_heads, head_size, softcap, window):
    """The accuracy bound of the int8 cache, unified_attention (chunked prefill, decode, prefill)
    and paged_attention (its decode rows) on both paths."""
    q_lens, kv_lens = [3, 1, 7], [40, 70, 7]
    query, kc, vc, table, cu, seqused = make_paged_batch(q_lens, kv_lens, heads, kv_heads, head_size, 16)
    kq, vq, ks, vs = quantize_paged(kc, vc)
    scale = head_size ** -0.5
    decode = cu[:-1].long()
    with kernel_path(path):
        ref = ak.unified_attention(query, kc, vc, table, cu, seqused, 7, 70, scale, softcap, window)
        got = ak.unified_attention(query, kq, vq, table, cu, seqused, 7, 70, scale, softcap, window, "int8", ks, vs)
        paged_ref = ak.paged_attention(query[decode], kc, vc, table, seqused, scale, softcap, window)
        paged = ak.paged_attention(query[decode], kq, vq, table, seqused, scale, softcap, window, "int8", ks, vs)
    err, paged_err = (got - ref).abs().max().item(), (paged - paged_ref).abs().max().item()
    assert 0 < err <= INT8_VS_FLOAT and 0 < paged_err <= INT8_VS_FLOAT, (err, paged_err)


def test_bad_inputs_int8(values_checked):
    out, query, kq, vq, table, cu, seqused, mq, mk, scale, cap, win, _, ks, vs = _int8_args()
    _, _, kc, vc, *_ = _args()
    op = OPS.unified_attention

    def call(**kw):
        args = dict(out=out, query=query, key_cache=kq, value_cache=vq, block_table=table, cu_seqlens_q=cu,
                    seqused_k=seqused, max_seqlen_q=mq, max_seqlen_k=mk, scale=scale, softcap=cap, sliding_window=win,
                    kv_cache_dtype="int8", k_scale=ks, v_scale=vs)
        args.update(kw)
        return op(*args.values())

    def raises_naming(exc, name, call, **kw):
        with pytest.raises(exc, match=rf"^{name}\b"):
            call(**kw)

    raises_naming(ValueError, "kv_cache_dtype", call, kv_cache_dtype="fp8")
    raises_naming(TypeError, "key_cache", call, key_cache=kc, value_cache=vc)  # float caches read as int8
    raises_naming(TypeError, "key_cache", call, kv_cache_dtype="auto", k_scale=None, v_scale=None)  # int8 as float
    raises_naming(ValueError, "k_scale", call, kv_cache_dtype="auto", key_cache=kc, value_cache=vc)  # scales with auto
    raises_naming(TypeError, "k_scale", call, k_scale=None)
    raises_naming(TypeError, "v_scale", call, v_scale=vs.half())
    raises_naming(ValueError, "k_scale", call, k_scale=ks[:, :, :8].contiguous())  # not [num_blocks, KVH, block_size]
    raises_naming(ValueError, "v_scale", call, v_scale=vs.transpose(1, 2).contiguous().transpose(1, 2))
    raises_naming(ValueError, "k_scale", call, k_scale=torch.ones(3))  # static: one or [KVH] = [2]
    raises_naming(ValueError, "k_scale", call, k_scale=torch.ones(2))  # static beside a scale cache
    raises_naming(ValueError, "k_scale", call, k_scale=ks.to("meta"))


@pytest.mark.parametrize("kv_lens", [[1, 17, 40], [33, 0, 5], [16]])
@pytest.mark.parametrize("heads,kv_heads,softcap,window", [(8, 8, 0.0, 0), (8, 2, 30.0, 0), (5, 1, 0.0, 4)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_decode_traceable_matches_independent(kv_lens, heads, kv_heads, softcap, window, dtype):
    """The decode graph's form (compilation/decompose.py) of a decode batch: NaN in every unused
    slot, a strided query, a bad block id inside a sequence's blocks (its keys hidden), an empty
    sequence (0 out), and a max_seqlen_k whose gather reaches past every sequence. fp32 caches take
    the values' bmm, bf16 caches the fused sum."""
    from ascendtile.ops.reference.attention_unified import unified_attention_decode_traceable

    q_lens = [1] * len(kv_lens)
    query, kc, vc, table, cu, seqused = make_paged_batch(q_lens, kv_lens, heads, kv_heads, 32, 16, dtype)
    if max(kv_lens) > 16:
        row = kv_lens.index(max(kv_lens))
        table[row, 1] = kc.shape[0] + 7  # out of range: keys 16..31 of that sequence are hidden
    strided = torch.randn(len(kv_lens), heads + 3, 32, dtype=dtype)
    strided[:, :heads] = query
    query = strided[:, :heads]
    out = torch.full(query.shape, float("nan"), dtype=dtype)
    max_k = min(max(kv_lens) + 5, table.shape[1] * 16)
    unified_attention_decode_traceable(out, query, kc, vc, table, cu, seqused, 1, max_k, 0.2, softcap, window)
    expect = paged_formula(query, kc, vc, table, q_lens, kv_lens, 0.2, softcap, window)
    tol = 1e-5 if dtype == torch.float32 else 1e-2  # bf16: the output rounded once (fp32 math inside)
    torch.testing.assert_close(out.double(), expect, rtol=tol, atol=tol)
    with pytest.raises(ValueError, match="^kv_cache_dtype: the traceable decode attention reads float caches"):
        unified_attention_decode_traceable(out, query, kc, vc, table, cu, seqused, 1, max_k, 0.2, softcap, window,
                                           "int8")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_decode_traceable_compiled_matches_independent(dtype):
    """The same form as Inductor compiles it into the decode graph: the fused gather-and-sum of the
    scores, and of the values for bf16 caches (a bmm for fp32), over NaN-poisoned unused slots, a
    bad block id and an empty sequence, against the independent formula."""
    from ascendtile.ops.reference.attention_unified import unified_attention_decode_traceable

    kv_lens, heads, kv_heads = [1, 17, 40, 0], 8, 2
    query, kc, vc, table, cu, seqused = make_paged_batch([1] * len(kv_lens), kv_lens, heads, kv_heads, 32, 16, dtype)
    table[2, 1] = kc.shape[0] + 7  # keys 16..31 of the 40-key sequence are hidden
    out = torch.full(query.shape, float("nan"), dtype=dtype)
    compiled = torch.compile(unified_attention_decode_traceable, backend="inductor", fullgraph=True)
    compiled(out, query, kc, vc, table, cu, seqused, 1, 45, 0.2, 0.0, 0)
    expect = paged_formula(query, kc, vc, table, [1] * len(kv_lens), kv_lens, 0.2)
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(out.double(), expect, rtol=tol, atol=tol)
