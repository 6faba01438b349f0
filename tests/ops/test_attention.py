"""unified_attention, paged_attention, flash_attention_varlen: the references vs an independent
per-sequence fp64 formula, opcheck, torch.compile, functional wrappers and bad inputs.

make_paged_batch / independent_attention are also used by tests/kernels/test_attention_*.py."""
import pytest
import torch

import ascendkit.ops as ak
from opchecks import compiles, opcheck, raises_naming

OPS = torch.ops.ascend


def make_paged_batch(q_lens, kv_lens, heads, kv_heads, head_size, block_size, dtype=torch.float32, num_blocks=None):
    """Random paged inputs: unit-variance query and cache rows, randomly permuted block ids, a -1
    padded table with one spare column, NaN in every cache slot no sequence uses."""
    blocks_of = [-(-k // block_size) for k in kv_lens]
    num_blocks = num_blocks or sum(blocks_of) + 3
    perm = torch.randperm(num_blocks)
    table = torch.full((len(kv_lens), max(blocks_of, default=0) + 1), -1, dtype=torch.int32)
    shape = (num_blocks, block_size, kv_heads, head_size)
    key_cache, value_cache = torch.full(shape, float("nan"), dtype=dtype), torch.full(shape, float("nan"), dtype=dtype)
    used = 0
    for b, k in enumerate(kv_lens):
        ids = perm[used:used + blocks_of[b]]
        used += blocks_of[b]
        table[b, :blocks_of[b]] = ids.int()
        slots = (ids[:, None] * block_size + torch.arange(block_size)).flatten()[:k]
        key_cache.view(-1, kv_heads, head_size)[slots] = torch.randn(k, kv_heads, head_size).to(dtype)
        value_cache.view(-1, kv_heads, head_size)[slots] = torch.randn(k, kv_heads, head_size).to(dtype)
    query = torch.randn(sum(q_lens), heads, head_size).to(dtype)
    cu = torch.tensor([0, *torch.tensor(q_lens, dtype=torch.long).cumsum(0).tolist()], dtype=torch.int32)
    return query, key_cache, value_cache, table, cu, torch.tensor(kv_lens, dtype=torch.int32)


def independent_attention(query, keys, values, q_lens, kv_lens, scale, softcap=0.0, window=0, causal=True):
    """fp64, one sequence at a time. keys/values: a list of [kv_len, KVH, D] per sequence."""
    out = torch.zeros(query.shape, dtype=torch.float64)
    heads, start = query.shape[1], 0
    for q_len, kv_len, k, v in zip(q_lens, kv_lens, keys, values):
        rows = slice(start, start + q_len)
        start += q_len
        if q_len == 0 or kv_len == 0:
            continue
        group = heads // k.shape[1]
        k = k.double().repeat_interleave(group, dim=1)
        v = v.double().repeat_interleave(group, dim=1)
        s = torch.einsum("qhd,khd->hqk", query[rows].double(), k) * scale
        if softcap:
            s = softcap * torch.tanh(s / softcap)
        p_abs = torch.arange(kv_len - q_len, kv_len)[:, None]  # absolute position of each query
        j = torch.arange(kv_len)[None, :]
        hidden = (j > p_abs) if causal else torch.zeros(q_len, kv_len, dtype=torch.bool)
        if window > 0:
            hidden = hidden | (j <= p_abs - window)
        p = torch.softmax(s.masked_fill(hidden, float("-inf")), -1).nan_to_num(0.0)
        out[rows] = torch.einsum("hqk,khd->qhd", p, v)
    return out


def paged_keys(cache, table, kv_lens):
    """Each sequence's rows of a paged cache, read slot by slot."""
    block_size = cache.shape[1]
    return [torch.stack([cache[int(table[b, j // block_size]), j % block_size] for j in range(k)])
            if k else cache[:0, 0] for b, k in enumerate(kv_lens)]


CASES = [  # q_lens, kv_lens: decode, chunked prefill over context, prefill from scratch, empty sequence
    ([1, 1, 1], [1, 17, 40]),
    ([3, 1, 5, 1], [19, 33, 5, 0]),
    ([7, 2], [7, 2]),
]


@pytest.mark.parametrize("q_lens,kv_lens", CASES)
@pytest.mark.parametrize("heads,kv_heads,softcap,window", [(8, 8, 0.0, 0), (8, 2, 30.0, 0), (5, 1, 0.0, 4)])
def test_unified_reference_matches_independent(q_lens, kv_lens, heads, kv_heads, softcap, window):
    query, kc, vc, table, cu, seqused = make_paged_batch(q_lens, kv_lens, heads, kv_heads, 32, 16)
    got = ak.unified_attention(query, kc, vc, table, cu, seqused, max(q_lens), max(kv_lens), 0.2, softcap, window)
    expect = independent_attention(query, paged_keys(kc, table, kv_lens), paged_keys(vc, table, kv_lens),
                                   q_lens, kv_lens, 0.2, softcap, window)
    assert not got.isnan().any()
    torch.testing.assert_close(got.double(), expect, rtol=1e-5, atol=1e-5)
    if 0 in kv_lens:
        b = kv_lens.index(0)
        assert (got[int(cu[b]):int(cu[b + 1])] == 0).all()


@pytest.mark.parametrize("softcap,window", [(0.0, 0), (20.0, 5)])
def test_paged_reference_matches_independent(softcap, window):
    kv_lens = [1, 17, 64, 0, 33]
    query, kc, vc, table, _, seqused = make_paged_batch([1] * 5, kv_lens, 8, 2, 64, 16)
    got = ak.paged_attention(query, kc, vc, table, seqused, 0.125, softcap, window)
    expect = independent_attention(query, paged_keys(kc, table, kv_lens), paged_keys(vc, table, kv_lens),
                                   [1] * 5, kv_lens, 0.125, softcap, window)
    torch.testing.assert_close(got.double(), expect, rtol=1e-5, atol=1e-5)
    assert (got[3] == 0).all()


@pytest.mark.parametrize("causal", [True, False])
def test_varlen_reference_matches_independent(causal):
    q_lens, kv_lens = [5, 1, 9, 3], [5, 4, 9, 0]
    q = torch.randn(sum(q_lens), 4, 32)
    k, v = torch.randn(sum(kv_lens), 2, 32), torch.randn(sum(kv_lens), 2, 32)
    cu_q = torch.tensor([0, 5, 6, 15, 18], dtype=torch.int32)
    cu_k = torch.tensor([0, 5, 9, 18, 18], dtype=torch.int32)
    got = ak.flash_attention_varlen(q, k, v, cu_q, cu_k, 9, 9, 0.3, causal)
    keys = list(k.split(kv_lens))
    expect = independent_attention(q, keys, list(v.split(kv_lens)), q_lens, kv_lens, 0.3, causal=causal)
    torch.testing.assert_close(got.double(), expect, rtol=1e-5, atol=1e-5)


def test_mixed_batch_long_context_reference():
    q_lens, kv_lens = [1, 129, 1, 40], [1000, 129, 255, 1040]
    query, kc, vc, table, cu, seqused = make_paged_batch(q_lens, kv_lens, 4, 1, 16, 64)
    got = ak.unified_attention(query, kc, vc, table, cu, seqused, 129, 1040, 0.25, 0.0, 300)
    expect = independent_attention(query, paged_keys(kc, table, kv_lens), paged_keys(vc, table, kv_lens),
                                   q_lens, kv_lens, 0.25, 0.0, 300)
    torch.testing.assert_close(got.double(), expect, rtol=1e-5, atol=1e-5)


def test_reference_half_precision_close():
    query, kc, vc, table, cu, seqused = make_paged_batch([2, 1], [20, 9], 4, 2, 64, 16, dtype=torch.bfloat16)
    got = ak.unified_attention(query, kc, vc, table, cu, seqused, 2, 20, 0.125)
    expect = independent_attention(query, paged_keys(kc, table, [20, 9]), paged_keys(vc, table, [20, 9]),
                                   [2, 1], [20, 9], 0.125)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.double(), expect, rtol=2e-2, atol=2e-2)


def _unified_args():
    query, kc, vc, table, cu, seqused = make_paged_batch([3, 1], [19, 5], 4, 2, 16, 16)
    return [torch.empty_like(query), query, kc, vc, table, cu, seqused, 3, 19, 0.25, 0.0, 0]


def _paged_args():
    query, kc, vc, table, _, seqused = make_paged_batch([1, 1], [19, 5], 4, 2, 16, 16)
    return [torch.empty_like(query), query, kc, vc, table, seqused, 0.25, 0.0, 0]


def _varlen_args():
    q, k, v = torch.randn(6, 4, 16), torch.randn(9, 2, 16), torch.randn(9, 2, 16)
    cu_q, cu_k = torch.tensor([0, 4, 6], dtype=torch.int32), torch.tensor([0, 5, 9], dtype=torch.int32)
    return [torch.empty_like(q), q, k, v, cu_q, cu_k, 4, 5, 0.25, True]


ARGS = {"unified_attention": _unified_args, "paged_attention": _paged_args, "flash_attention_varlen": _varlen_args}


@pytest.mark.parametrize("name", list(ARGS))
def test_opcheck(name, reference_path):
    opcheck(getattr(OPS, name).default, ARGS[name]())


def test_compile_fullgraph():
    query, kc, vc, table, cu, seqused = make_paged_batch([3, 1], [19, 5], 4, 2, 16, 16)

    def step(query, kc, vc, table, cu, seqused):
        out = ak.unified_attention(query, kc, vc, table, cu, seqused, 3, 19, 0.25, 10.0, 8)
        dec = ak.paged_attention(query[:2].contiguous(), kc, vc, table, seqused, 0.25)
        dense = ak.flash_attention_varlen(query, query[:, :2], query[:, 2:], cu, cu, 3, 3, 0.25)
        return out.sum(-1) + dense.sum(-1), dec

    compiles(step, query, kc, vc, table, cu, seqused)


def test_unified_bad_inputs():
    out, query, kc, vc, table, cu, seqused, mq, mk, scale, cap, win = _unified_args()
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


def test_paged_and_varlen_bad_inputs():
    out, query, kc, vc, table, seqused, scale, cap, win = _paged_args()
    op = OPS.paged_attention
    raises_naming(TypeError, "query", op, out, query.int(), kc, vc, table, seqused, scale, cap, win)
    raises_naming(ValueError, "key_cache", op, torch.empty(2, 5, 16), torch.randn(2, 5, 16), kc, vc, table, seqused, scale, cap, win)
    raises_naming(ValueError, "block_tables", op, out, query, kc, vc, table[:1], seqused, scale, cap, win)
    # A table too short for a sequence's length: seq_len > capacity (checked where it needs no sync).
    raises_naming(ValueError, "seq_lens", op, out, query, kc, vc, table[:, :1], seqused, scale, cap, win)
    raises_naming(ValueError, "seq_lens", op, out, query, kc, vc, table, torch.tensor([19], dtype=torch.int32), scale, cap, win)
    raises_naming(TypeError, "seq_lens", op, out, query, kc, vc, table, seqused.long(), scale, cap, win)
    raises_naming(ValueError, "block_tables", op, out, query, kc, vc, table.to("meta"), seqused, scale, cap, win)
    raises_naming(ValueError, "query", op, out, torch.randn(2, 16, 4).transpose(1, 2), kc, vc, table, seqused, scale, cap, win)

    out, q, k, v, cu_q, cu_k, mq, mk, scale, causal = _varlen_args()
    op = OPS.flash_attention_varlen
    raises_naming(ValueError, "k", op, out, q, torch.randn(9, 3, 16), torch.randn(9, 3, 16), cu_q, cu_k, mq, mk, scale, causal)
    raises_naming(ValueError, "v", op, out, q, k, v[:5], cu_q, cu_k, mq, mk, scale, causal)
    raises_naming(TypeError, "k", op, out, q, k.to(torch.int64), v, cu_q, cu_k, mq, mk, scale, causal)
    raises_naming(ValueError, "cu_seqlens_k", op, out, q, k, v, cu_q, cu_k[:2], mq, mk, scale, causal)
    raises_naming(ValueError, "max_seqlen_k", op, out, q, k, v, cu_q, cu_k, mq, 10, scale, causal)
    raises_naming(ValueError, "v", op, out, q, k, v.to("meta"), cu_q, cu_k, mq, mk, scale, causal)


def test_bad_input_writes_nothing(triton_path):
    out, query, kc, vc, table, cu, seqused, mq, mk, scale, cap, win = _unified_args()
    out.fill_(7.0)
    with pytest.raises(ValueError):
        OPS.unified_attention(out, query, kc, vc, table[:1], cu, seqused, mq, mk, scale, cap, win)
    assert (out == 7.0).all()
