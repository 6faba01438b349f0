"""mla_attention, the op contract: reference vs an independent per-sequence fp64 formula,
FlashMLA-style cosine check, opcheck and torch.compile on both kernel paths, the functional
wrapper and bad inputs; over an int8 latent cache the same formula over the dequantized cache,
and the error against the float cache on both paths. (Triton kernel vs reference numerics:
tests/kernels/test_mla.py.)"""
import pytest
import torch

import ascendtile.ops as ak
from opchecks import compiles, kernel_path, op_contract_tests, raises_naming

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


def quantize_latent(cache, lora, static=None):
    """The int8 latent cache holding make_batch's float cache, written by concat_and_cache_mla with
    kv_cache_dtype "int8": (cache, kv_scale), kv_scale the scale cache [num_blocks, 2, block_size]
    (NaN in unused slots) or the static scale given."""
    num_blocks, block_size, width = cache.shape
    rows = cache.reshape(-1, width)
    used = ~rows.isnan().all(-1)
    quantized = torch.randint(-127, 128, cache.shape, dtype=torch.int8)
    scale = torch.full((num_blocks, 2, block_size), float("nan")) if static is None else static
    slots = torch.arange(num_blocks * block_size)[used]
    if static is None:
        ak.concat_and_cache_mla(rows[used, :lora], rows[used, lora:], quantized, slots, "int8", None, scale)
    else:
        ak.concat_and_cache_mla(rows[used, :lora], rows[used, lora:], quantized, slots, "int8", scale)
    return quantized, scale


def dequantized_latent(cache, scale, lora):
    """fp64 values of a whole int8 latent cache (each part times its scale)."""
    if scale.dim() != 3:
        return cache.double() * scale.double()
    s = scale.double().transpose(1, 2)  # [num_blocks, block_size, 2]
    return torch.cat((cache[..., :lora].double() * s[..., :1], cache[..., lora:].double() * s[..., 1:]), -1)


def _int8_args():
    out, query, cache, table, cu, seqused, mq, mk, lora, scale = _args()
    quantized, kv_scale = quantize_latent(cache, lora)
    # opcheck compares reruns with NaN != NaN: no NaN in the unused slots' scales
    return [out, query, quantized, table, cu, seqused, mq, mk, lora, scale, "int8", kv_scale.nan_to_num()]


test_opcheck, test_compile = op_contract_tests({"mla_attention": _args, "mla_attention:int8": _int8_args})


def test_wrapper_compiles():
    def attend(query, cache, table, cu, seqused):
        return ak.mla_attention(query, cache, table, cu, seqused, 3, 33, 64, 0.125).sum(-1)

    compiles(attend, *_args()[1:6])


def test_bad_inputs(values_checked):
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


@pytest.mark.parametrize("q_lens,kv_lens", CASES[1:3] + CASES[4:])
@pytest.mark.parametrize("static", [False, True])
def test_int8_reference_matches_independent(q_lens, kv_lens, static):
    """Over the int8 latent cache: the fp64 formula over the dequantized cache (per-token latent and
    rope scales, or one static scale), NaN scales in unused slots, -1 table padding."""
    lora, rope = 128, 32
    query, cache, table, cu, seqused = make_batch(q_lens, kv_lens, 16, lora, rope, 16)
    cache[..., lora:] *= 20  # a rope part on another scale than the latent
    quantized, kv_scale = quantize_latent(cache, lora, torch.tensor(0.4) if static else None)
    got = ak.mla_attention(query, quantized, table, cu, seqused, max(q_lens), max(kv_lens), lora, 0.05, "int8",
                           kv_scale)
    expect = independent_mla(query, dequantized_latent(quantized, kv_scale, lora), table, cu, seqused, lora, 0.05)
    assert not got.isnan().any()
    torch.testing.assert_close(got.double(), expect, rtol=1e-5, atol=1e-5)


# mla_attention over the int8 latent cache vs over the float cache: max |Δ| for unit-variance queries
# and latents at scale (L+R)^-0.5 (measured on both paths, L = 64 and 512, contexts to 300: <= 0.016).
MLA_INT8_VS_FLOAT = 0.05


@pytest.mark.parametrize("path", ["reference", "triton"])
def test_int8_error_vs_float_cache(path):
    lora, rope = 128, 32
    q_lens, kv_lens = [1, 5, 1], [300, 40, 17]
    query, cache, table, cu, seqused = make_batch(q_lens, kv_lens, 16, lora, rope, 16)
    quantized, kv_scale = quantize_latent(cache, lora)
    scale = (lora + rope) ** -0.5
    with kernel_path(path):
        ref = ak.mla_attention(query, cache, table, cu, seqused, 5, 300, lora, scale)
        got = ak.mla_attention(query, quantized, table, cu, seqused, 5, 300, lora, scale, "int8", kv_scale)
    err = (got - ref).abs().max().item()
    assert 0 < err <= MLA_INT8_VS_FLOAT, err


def test_bad_inputs_int8(values_checked):
    args = _int8_args()
    op = OPS.mla_attention
    cache, kv_scale = args[2], args[11]
    float_cache = _args()[2]
    raises_naming(TypeError, "kv_cache", op, *args[:2], float_cache, *args[3:])
    raises_naming(TypeError, "kv_cache", op, *args[:10], "auto", None)
    raises_naming(ValueError, "kv_scale", op, *args[:2], float_cache, *args[3:10], "auto", kv_scale)
    raises_naming(TypeError, "kv_scale", op, *args[:11], None)
    raises_naming(ValueError, "kv_scale", op, *args[:11], kv_scale.transpose(1, 2).contiguous())  # [nb, bs, 2]
    raises_naming(ValueError, "kv_scale", op, *args[:11], torch.ones(2))  # static: one element
    raises_naming(ValueError, "kv_cache_dtype", op, *args[:10], "fp8", kv_scale)
    assert cache.dtype == torch.int8
