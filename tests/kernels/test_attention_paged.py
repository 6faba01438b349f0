"""paged_attention (decode): the Triton kernels (interpreter) vs the torch reference and the
independent fp64 formula; split-KV forced on and off gives the same result; GQA ratios, head and
block sizes, long contexts crossing block boundaries, NaN-poisoned unused slots, many blocks."""
import pytest
import torch

from ascendtile.kernels import attention_paged
from guarded import guarded, guards_intact, inner
from opchecks import kernel_path
from ops._attention import corrupt_table, dequantized, make_paged_batch, paged_formula, quantize_paged
from tolerances import assert_close

OPS = torch.ops.ascend
VS_FORMULA = {torch.float32: 1e-5, torch.float16: 5e-3, torch.bfloat16: 3e-2}


def check(kv_lens, heads, kv_heads, head_size, block_size, dtype=torch.float32, softcap=0.0, window=0,
          splits=(1, 4), num_blocks=None, strided=False):
    batch = len(kv_lens)
    query, kc, vc, table, _, seq_lens = make_paged_batch([1] * batch, kv_lens, heads, kv_heads, head_size, block_size,
                                                         dtype, num_blocks)
    if strided:  # the query as a column slice of a fused qkv row
        query = torch.cat([torch.randn(batch, 1, head_size).to(dtype), query, torch.randn(batch, 2, head_size).to(dtype)],
                          1)[:, 1:heads + 1]
    scale = head_size ** -0.5
    expect = torch.empty_like(query)
    OPS.paged_attention(expect, query, kc, vc, table, seq_lens, scale, softcap, window)
    formula = paged_formula(query, kc, vc, table, [1] * batch, kv_lens, scale, softcap, window)
    results = []
    for num_splits in splits:
        out = torch.full_like(query, float("nan"))
        attention_paged.paged_attention(out, query, kc, vc, table, seq_lens, scale, softcap, window,
                                        num_splits=num_splits)
        assert not out.isnan().any(), num_splits
        assert_close(out, expect)
        torch.testing.assert_close(out.double(), formula, rtol=VS_FORMULA[dtype], atol=VS_FORMULA[dtype])
        results.append(out)
    for other in results[1:]:  # split and unsplit differ only in fp32 summation order
        assert_close(other, results[0])
    return results[0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("heads,kv_heads", [(8, 8), (32, 8), (5, 1)])
def test_gqa_and_dtypes(dtype, heads, kv_heads):
    out = check([1, 17, 40, 0], heads, kv_heads, 32, 16, dtype)
    assert (out[3] == 0).all()  # seq_len 0 (a padded graph row) gives 0, not NaN


@pytest.mark.parametrize("head_size,block_size", [(64, 64), (80, 16), (128, 128), (256, 64)])
def test_head_and_block_sizes(head_size, block_size):
    check([5, 130, 300], 4, 2, head_size, block_size, torch.float16, splits=(1, 3))


def test_lengths_crossing_blocks_split_kv():
    check([1, 17, 255, 1025], 4, 1, 16, 16, splits=(1, 2, 7, 16))


@pytest.mark.parametrize("softcap,window", [(30.0, 0), (0.0, 100), (5.0, 7)])
def test_softcap_and_sliding_window(softcap, window):
    check([3, 200, 1025], 8, 2, 32, 64, softcap=softcap, window=window, splits=(1, 5))


def test_many_blocks():
    check([300, 17, 1], 2, 1, 16, 16, num_blocks=32768)


def test_strided_query():
    check([40, 17, 600], 8, 2, 32, 16, torch.float16, strided=True)


def test_split_heuristic():
    cpu = torch.device("cpu")
    # Few (sequence, KV head) items and a long table: split; a full batch or short table: don't.
    assert attention_paged.choose_splits(cpu, 1, 1, 4096) > 1
    assert attention_paged.choose_splits(cpu, 64, 8, 4096) == 1
    assert attention_paged.choose_splits(cpu, 1, 1, 256) == 1


def test_default_launch_splits_and_matches(triton_path):
    # The op picks splits itself for a small batch over a long table (4 interpreter "cores").
    query, kc, vc, table, _, seq_lens = make_paged_batch([1], [1000], 4, 1, 16, 64)
    assert attention_paged.choose_splits(query.device, 1, 1, table.shape[1] * 64) > 1
    out = torch.empty_like(query)
    OPS.paged_attention(out, query, kc, vc, table, seq_lens, 0.25, 0.0, 0)
    with kernel_path("reference"):
        expect = torch.empty_like(query)
        OPS.paged_attention(expect, query, kc, vc, table, seq_lens, 0.25, 0.0, 0)
    assert_close(out, expect)


@pytest.mark.parametrize("softcap,window", [(0.0, 0), (5.0, 30)])
def test_bad_block_ids_hide_their_keys(softcap, window):
    # Caches between NaN guard blocks: a bad id read as a block (num_blocks, num_blocks + 1, -1,
    # -2) would bring NaN into the output; the last sequence has no valid block at all (out 0).
    kv_lens = [40, 17, 300, 33, 20]
    query, kc, vc, table, _, seq_lens = make_paged_batch([1] * 5, kv_lens, 4, 2, 32, 16)
    table = corrupt_table(table, kv_lens, 16, kc.shape[0])
    kbuf, vbuf = guarded(kc), guarded(vc)
    formula = paged_formula(query, kc, vc, table, [1] * 5, kv_lens, 0.25, softcap, window)
    with kernel_path("reference"):
        expect = torch.full_like(query, float("nan"))
        OPS.paged_attention(expect, query, inner(kbuf), inner(vbuf), table, seq_lens, 0.25, softcap, window)
    outs = [expect]
    for num_splits in (1, 4):
        out = torch.full_like(query, float("nan"))
        attention_paged.paged_attention(out, query, inner(kbuf), inner(vbuf), table, seq_lens, 0.25, softcap, window,
                                        num_splits=num_splits)
        outs.append(out)
    assert guards_intact(kbuf) and guards_intact(vbuf)
    for out in outs:
        assert not out.isnan().any() and (out[-1] == 0).all()
        torch.testing.assert_close(out.double(), formula, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype,static,softcap,window", [(torch.float32, False, 0.0, 0), (torch.bfloat16, False, 5.0, 40),
                                                         (torch.float16, True, 0.0, 0)])
def test_int8_cache(dtype, static, softcap, window):
    """Over an int8 cache, split-KV off and on (the static V scale applied to each split's partial
    accumulator): kernel vs reference vs the fp64 formula over the dequantized cache."""
    kv_lens = [1, 17, 300, 0]
    query, kc, vc, table, _, seq_lens = make_paged_batch([1] * 4, kv_lens, 8, 2, 64, 16, dtype)
    kq, vq, ks, vs = quantize_paged(kc, vc, (torch.tensor([0.02, 0.03]), torch.tensor(0.025)) if static else None)
    expect = torch.empty_like(query)
    OPS.paged_attention(expect, query, kq, vq, table, seq_lens, 0.125, softcap, window, "int8", ks, vs)
    formula = paged_formula(query, dequantized(kq, ks), dequantized(vq, vs), table, [1] * 4, kv_lens, 0.125, softcap,
                            window)
    for num_splits in (1, 4):
        out = torch.full_like(query, float("nan"))
        attention_paged.paged_attention(out, query, kq, vq, table, seq_lens, 0.125, softcap, window, "int8", ks, vs,
                                        num_splits=num_splits)
        assert not out.isnan().any() and (out[3] == 0).all(), num_splits
        assert_close(out, expect)
        torch.testing.assert_close(out.double(), formula, rtol=VS_FORMULA[dtype], atol=VS_FORMULA[dtype])
