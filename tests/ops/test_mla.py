"""mla_attention, the op contract: reference vs an independent per-sequence fp64 formula,
FlashMLA-style cosine check, opcheck and torch.compile on both kernel paths, the functional
wrapper and bad inputs. (Triton kernel vs reference numerics: tests/kernels/test_mla.py.)"""
import pytest
import torch

import ascendtile.ops as ak
from opchecks import compiles, op_contract_tests, raises_naming

OPS = torch.ops.ascend


def make_batch(q_lens, kv_lens, heads, lora, rope, block_size, dtype=torch.float32, num_blocks=None):
    """Random paged MLA inputs: shuffled block ids, -1 padded table, NaN in every unused cache slot."""
    max_blocks = max(-(-k // block_size) for k in kv_lens) + 1  # one spare -1 column
    need = sum(-(-k // block_size) for k in kv_lens)
    num_blocks = num_blocks or need + 3
    perm = torch.randperm(num_blocks).tolist()
    table = torch.full((len(kv_lens), max_blocks), -1, dtype=torch.int32)
    cache = torch.full((num_blocks, block_size, lora + rope), float("nan"), dtype=dtype)
    for b, k in enumerate(kv_lens):
        for j in range(-(-k // block_size)):
            blk = perm.pop()
            table[b, j] = blk
            used = min(block_size, k - j * block_size)
            cache[blk, :used] = torch.randn(used, lora + rope, dtype=dtype)
    query = torch.randn(sum(q_lens), heads, lora + rope, dtype=dtype)
    cu = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)
    return query, cache, table, cu, torch.tensor(kv_lens, dtype=torch.int32)


def independent_mla(query, cache, table, cu, seqused, lora, scale):
    """fp64, one sequence at a time: slots gathered row by row, mask = triu(kv_len - q_len + 1),
    and keys whose block id is outside [0, num_blocks) hidden."""
    out = torch.zeros(*query.shape[:2], lora, dtype=torch.float64)
    num_blocks, block_size = cache.shape[:2]
    for b in range(seqused.shape[0]):
        q0, q1, kv_len = int(cu[b]), int(cu[b + 1]), int(seqused[b])
        if kv_len == 0 or q1 == q0:
            continue
        slots = [(int(table[b, j // block_size]), j % block_size) for j in range(kv_len)]
        ok = torch.tensor([0 <= blk < num_blocks for blk, _ in slots])
        keys = torch.stack([cache[blk, off] if 0 <= blk < num_blocks else torch.zeros_like(cache[0, 0])
                            for blk, off in slots]).double()  # [S, L+R]
        q = query[q0:q1].double()  # [Q, H, L+R]
        s = torch.einsum("qhd,sd->hqs", q, keys) * scale
        masked = torch.triu(torch.ones(q1 - q0, kv_len, dtype=torch.bool), diagonal=kv_len - (q1 - q0) + 1)
        p = torch.softmax(s.masked_fill(masked | ~ok[None, :], float("-inf")), -1).nan_to_num(0.0)
        out[q0:q1] = torch.einsum("hqs,sl->qhl", p, keys[:, :lora])
    return out


def cos_diff(x, y):
    """FlashMLA's check: 1 - 2·Σxy / Σ(x² + y²), in fp64."""
    x, y = x.double(), y.double()
    return (1 - 2 * (x * y).sum() / (x * x + y * y).sum()).item()


CASES = [  # q_lens, kv_lens: decode, chunked prefill with context, prefill from scratch, empty seq,
    # and a long chunk beside decodes (the reference's per-sequence branch)
    ([1, 1, 1], [1, 17, 40]),
    ([3, 1, 5, 1], [19, 33, 5, 0]),
    ([7], [7]),
    ([9, 1, 0, 1], [20, 5, 3, 0]),
]


@pytest.mark.parametrize("q_lens,kv_lens", CASES)
@pytest.mark.parametrize("lora,rope,heads,block_size", [(128, 32, 16, 16), (512, 64, 32, 64)])
def test_reference_matches_independent_formula(q_lens, kv_lens, lora, rope, heads, block_size):
    query, cache, table, cu, seqused = make_batch(q_lens, kv_lens, heads, lora, rope, block_size)
    scale = (lora + rope) ** -0.5
    got = ak.mla_attention(query, cache, table, cu, seqused, max(q_lens), max(kv_lens), lora, scale)
    expect = independent_mla(query, cache, table, cu, seqused, lora, scale)
    assert not got.isnan().any()
    torch.testing.assert_close(got.double(), expect, rtol=1e-5, atol=1e-5)
    assert cos_diff(got, expect) < 1e-5
    if 0 in kv_lens:
        b = kv_lens.index(0)
        assert (got[int(cu[b]):int(cu[b + 1])] == 0).all()


def test_reference_half_precision_close():
    query, cache, table, cu, seqused = make_batch([2, 1], [20, 9], 16, 128, 32, 16, dtype=torch.bfloat16)
    got = ak.mla_attention(query, cache, table, cu, seqused, 2, 20, 128, 0.1147)
    assert got.dtype == torch.bfloat16
    assert cos_diff(got, independent_mla(query, cache, table, cu, seqused, 128, 0.1147)) < 1e-4


def _args():
    query, cache, table, cu, seqused = make_batch([3, 1], [19, 33], 16, 64, 32, 16)
    cache = cache.nan_to_num()  # opcheck compares reruns with NaN != NaN
    return [torch.empty(4, 16, 64), query, cache, table, cu, seqused, 3, 33, 64, 0.125]


test_opcheck, test_compile = op_contract_tests({"mla_attention": _args})


def test_wrapper_compiles():
    def attend(query, cache, table, cu, seqused):
        return ak.mla_attention(query, cache, table, cu, seqused, 3, 33, 64, 0.125).sum(-1)

    compiles(attend, *_args()[1:6])


def test_bad_inputs():
    out, query, cache, table, cu, seqused, mq, mk, lora, scale = _args()
    op = OPS.mla_attention

    def call(**kw):
        args = dict(out=out, query=query, kv_cache=cache, block_table=table, cu_seqlens_q=cu, seqused_k=seqused,
                    max_seqlen_q=mq, max_seqlen_k=mk, kv_lora_rank=lora, scale=scale)
        args.update(kw)
        return lambda: op(*args.values())

    def expect(exc, name, **kw):
        raises_naming(exc, name, call(**kw))

    expect(TypeError, "query", query=query.int())
    expect(TypeError, "kv_cache", kv_cache=cache.half())
    expect(TypeError, "out", out=out.half())
    expect(ValueError, "kv_cache", kv_cache=cache[..., :90])
    expect(ValueError, "kv_cache", kv_cache=cache[:, :8])
    expect(ValueError, "query", query=query.transpose(1, 2).contiguous().transpose(1, 2))
    expect(ValueError, "out", out=torch.empty(4, 16, 63))
    expect(TypeError, "block_table", block_table=table.long())
    expect(ValueError, "block_table", block_table=table[:1])
    expect(TypeError, "cu_seqlens_q", cu_seqlens_q=cu.float())
    expect(ValueError, "cu_seqlens_q", cu_seqlens_q=cu[:2])
    expect(TypeError, "seqused_k", seqused_k=seqused.long())
    expect(ValueError, "kv_lora_rank", kv_lora_rank=96, out=torch.empty(4, 16, 96))
    expect(ValueError, "max_seqlen_k", max_seqlen_k=10_000)
    expect(ValueError, "max_seqlen_q", max_seqlen_q=-1)
    # A length past what the table holds (checked where it needs no sync), or negative.
    expect(ValueError, "seqused_k", seqused_k=torch.tensor([19, table.shape[1] * 16 + 1], dtype=torch.int32))
    expect(ValueError, "seqused_k", seqused_k=torch.tensor([19, -1], dtype=torch.int32))
    expect(ValueError, "scale", scale=0.0)
    expect(ValueError, "kv_cache", kv_cache=cache.to("meta"))


@pytest.mark.parametrize("path", ["reference", "triton"])
def test_bad_input_writes_nothing(path, monkeypatch):
    monkeypatch.setenv("ASCENDTILE_KERNELS", path)
    args = _args()
    args[0].fill_(7.0)
    args[8] = 0
    with pytest.raises(ValueError, match="^kv_lora_rank"):
        OPS.mla_attention(*args)
    assert (args[0] == 7.0).all()


@pytest.mark.parametrize("path", ["reference", "triton"])
def test_check_indices_switch(path, monkeypatch):
    out, query, cache, table, cu, seqused, mq, mk, lora, scale = _args()
    monkeypatch.setenv("ASCENDTILE_KERNELS", path)
    monkeypatch.setenv("ASCENDTILE_CHECK_INDICES", "1")
    wrong = table.clone()
    wrong[0, 0] = cache.shape[0]
    with pytest.raises(ValueError, match=rf"^block_table: entry \[0, 0\] is {cache.shape[0]}, outside"):
        OPS.mla_attention(out, query, cache, wrong, cu, seqused, mq, mk, lora, scale)
    OPS.mla_attention(out, query, cache, table, cu, seqused, mq, mk, lora, scale)
