"""unified_attention: the Triton kernel (interpreter) vs the torch reference and vs the independent
fp64 formula of tests/ops/_attention.py, over GQA ratios, head/block sizes, sequence sets that
cross block boundaries, strided query/out/caches, NaN-poisoned unused cache slots (the Ascend
gate of the attention kernels: tests/lowering/; opcheck / torch.compile on both paths: tests/ops/.)"""
import pytest
import torch

from guarded import guarded, guards_intact, inner
from opchecks import kernel_path
from ops._attention import corrupt_table, dequantized, make_paged_batch, paged_formula, quantize_paged
from tolerances import assert_close

OPS = torch.ops.ascend
# Kernel vs the fp64 formula: the kernel rounds probabilities to the storage dtype for the P·V dot.
VS_FORMULA = {torch.float32: 1e-5, torch.float16: 5e-3, torch.bfloat16: 3e-2}


def strided_cache(cache: torch.Tensor) -> torch.Tensor:
    """The same values in a cache whose rows are padded (only the last dim is contiguous)."""
    wide = torch.full((*cache.shape[:-1], cache.shape[-1] + 8), float("nan"), dtype=cache.dtype)
    wide[..., :cache.shape[-1]] = cache
    return wide[..., :cache.shape[-1]]


def check(q_lens, kv_lens, heads, kv_heads, head_size, block_size, dtype=torch.float32, softcap=0.0, window=0,
          num_blocks=None, strided=False):
    query, kc, vc, table, cu, seqused = make_paged_batch(q_lens, kv_lens, heads, kv_heads, head_size, block_size,
                                                         dtype, num_blocks)
    out = torch.full_like(query, float("nan"))
    if strided:  # query and out as column slices of wider rows; caches with padded rows
        query = torch.cat([query, torch.randn(query.shape[0], 2, head_size).to(dtype)], 1)[:, :heads]
        out = torch.full((query.shape[0], heads + 3, head_size), float("nan"), dtype=dtype)[:, 1:heads + 1]
        kc, vc = strided_cache(kc), strided_cache(vc)
    scale = head_size ** -0.5
    args = [out, query, kc, vc, table, cu, seqused, max(q_lens), max(kv_lens), scale, softcap, window]
    with kernel_path("triton"):
        OPS.unified_attention(*args)
    expect = torch.empty_like(query)
    OPS.unified_attention(expect, *args[1:])
    assert not out.isnan().any()
    assert_close(out, expect)
    formula = paged_formula(query, kc, vc, table, q_lens, kv_lens, scale, softcap, window)
    tol = VS_FORMULA[dtype]
    torch.testing.assert_close(out.double(), formula, rtol=tol, atol=tol)
    return out, cu


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("heads,kv_heads", [(8, 8), (32, 8), (5, 1)])
def test_gqa_and_dtypes(dtype, heads, kv_heads):
    # chunked prefill over context, decode, prefill from scratch, an empty (padding) sequence
    out, cu = check([3, 1, 7, 1], [19, 33, 7, 0], heads, kv_heads, 32, 16, dtype)
    assert (out[int(cu[3]):int(cu[4])] == 0).all()


@pytest.mark.parametrize("head_size,block_size", [(64, 64), (80, 16), (128, 128), (256, 64), (32, 48)])
def test_head_and_block_sizes(head_size, block_size):
    check([2, 1, 5], [17, 130, 5], 4, 2, head_size, block_size, torch.float16)


def test_lengths_crossing_blocks_decode_only():
    # max_seqlen_q == 1 takes the paged decode kernels; 4 (sequence, KV head) items fill the 4
    # interpreter "cores", so no split here (the next test takes the split route).
    check([1, 1, 1, 1], [1, 17, 255, 1025], 4, 1, 16, 16)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_decode_step_with_absent_and_padding_rows(dtype):
    # A sequence with no new token (q_len 0: no row) and a padded graph row (q_len 1, seqused_k 0);
    # 3 (sequence, KV head) items < 4 interpreter cores and a 1040-token table: split-KV route.
    out, cu = check([1, 0, 1], [1025, 5, 0], 4, 1, 16, 16, dtype)
    assert (out[1] == 0).all()


def test_prefill_only():
    check([17, 64, 1], [17, 64, 1], 4, 2, 16, 64)


def test_mixed_batch_with_long_context():
    # query 1..129 over context 0..1000
    check([1, 129, 17, 1, 64], [1000, 129, 300, 1, 1064], 5, 1, 16, 64)



def test_query_blocks_found_by_token_index():
    # Work items are global query blocks (num_tokens // BLOCK_Q + num_seqs of them) whose sequence
    # the kernel finds by binary search over cu_seqlens_q: a long chunk at an unaligned offset,
    # many decodes, and empty sequences first, between and last (16-token blocks at group 2).
    q_lens = [0, 1, 37, 1, 1, 0, 1, 20, 1, 1, 1, 16, 1, 0, 9, 1, 0]
    kv_lens = [3, 40, 50, 1, 17, 8, 33, 20, 2, 64, 5, 16, 100, 0, 30, 7, 9]
    out, cu = check(q_lens, kv_lens, 4, 2, 16, 16)
    assert out.shape[0] == sum(q_lens)

@pytest.mark.parametrize("softcap,window", [(30.0, 0), (0.0, 5), (5.0, 40)])
def test_softcap_and_sliding_window(softcap, window):
    check([3, 1, 9], [19, 70, 9], 8, 2, 32, 16, softcap=softcap, window=window)


def test_strided_query_out_and_caches():
    check([3, 1, 9], [19, 70, 9], 8, 2, 64, 16, torch.bfloat16, strided=True)


def test_many_blocks():
    check([1, 4, 1], [300, 40, 17], 2, 1, 16, 16, num_blocks=32768)


def test_oversized_query_tile_is_refused_on_the_kernel_path(triton_path):
    # 32 query heads per KV head at 256 dims would not fit on chip: a clear error, nothing written.
    query, kc, vc, table, cu, seqused = make_paged_batch([2, 1], [5, 9], 32, 1, 256, 16)
    out = torch.full_like(query, 7.0)
    with pytest.raises(ValueError, match=r"^query\b"):
        OPS.unified_attention(out, query, kc, vc, table, cu, seqused, 2, 9, 0.0625, 0.0, 0)
    with pytest.raises(ValueError, match=r"^query\b"):
        OPS.paged_attention(out[:2], query[:2], kc, vc, table, seqused, 0.0625, 0.0, 0)
    assert (out == 7.0).all()


@pytest.mark.parametrize("softcap,window", [(0.0, 0), (5.0, 12)])
def test_bad_block_ids_hide_their_keys(softcap, window):
    # Chunked prefill, decode and prefill-from-scratch sequences whose tables hold bad ids of each
    # kind inside their lengths; the caches sit between NaN guard blocks, so a bad id read as a
    # block would bring NaN into the output. The last sequence has no valid block: its rows are 0.
    q_lens, kv_lens = [3, 1, 7, 2, 5], [19, 33, 7, 40, 20]
    query, kc, vc, table, cu, seqused = make_paged_batch(q_lens, kv_lens, 4, 2, 32, 16)
    table = corrupt_table(table, kv_lens, 16, kc.shape[0])
    kbuf, vbuf = guarded(kc), guarded(vc)
    formula = paged_formula(query, kc, vc, table, q_lens, kv_lens, 0.25, softcap, window)
    for path in ("reference", "triton"):
        out = torch.full_like(query, float("nan"))
        with kernel_path(path):
            OPS.unified_attention(out, query, inner(kbuf), inner(vbuf), table, cu, seqused, 7, 40, 0.25, softcap,
                                  window)
        assert guards_intact(kbuf) and guards_intact(vbuf), path
        assert not out.isnan().any() and (out[int(cu[-2]):] == 0).all(), path
        torch.testing.assert_close(out.double(), formula, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype,heads,kv_heads,head_size,block_size,softcap,window,static", [
    (torch.float32, 8, 2, 64, 16, 0.0, 0, False),
    (torch.bfloat16, 9, 3, 80, 64, 5.0, 12, False),  # odd head size, a padded GQA group, softcap and window
    (torch.float16, 4, 4, 32, 32, 0.0, 0, True),  # static per-head scales
])
def test_int8_cache(dtype, heads, kv_heads, head_size, block_size, softcap, window, static):
    """Over an int8 cache: the kernel (int8 tiles, scales applied to the scores and to P) vs the
    reference (the gathered rows dequantized) and vs the fp64 formula over the dequantized cache;
    a chunked prefill, decodes crossing blocks, a prefill and an empty sequence, NaN scales in
    every unused slot."""
    q_lens, kv_lens = [3, 1, 7, 1], [19, 80, 7, 0]
    query, kc, vc, table, cu, seqused = make_paged_batch(q_lens, kv_lens, heads, kv_heads, head_size, block_size, dtype)
    scales = (torch.rand(kv_heads) / 20 + 0.02, torch.tensor(0.03)) if static else None
    kq, vq, ks, vs = quantize_paged(kc, vc, scales)
    args = [query, kq, vq, table, cu, seqused, 7, 80, head_size ** -0.5, softcap, window, "int8", ks, vs]
    out = torch.full_like(query, float("nan"))
    with kernel_path("triton"):
        OPS.unified_attention(out, *args)
    expect = torch.empty_like(query)
    OPS.unified_attention(expect, *args)
    assert not out.isnan().any() and (out[int(cu[3]):] == 0).all()
    assert_close(out, expect)
    formula = paged_formula(query, dequantized(kq, ks), dequantized(vq, vs), table, q_lens, kv_lens,
                            head_size ** -0.5, softcap, window)
    torch.testing.assert_close(out.double(), formula, rtol=VS_FORMULA[dtype], atol=VS_FORMULA[dtype])


def test_int8_bad_block_ids_hide_their_keys():
    # The scale caches sit between NaN guard blocks: a bad id read as a block brings NaN in.
    q_lens, kv_lens = [3, 1, 7, 2], [19, 33, 7, 40]
    query, kc, vc, table, cu, seqused = make_paged_batch(q_lens, kv_lens, 4, 2, 32, 16)
    kq, vq, ks, vs = quantize_paged(kc, vc)
    table = corrupt_table(table, kv_lens, 16, kc.shape[0])
    ksbuf, vsbuf = guarded(ks), guarded(vs)
    formula = paged_formula(query, dequantized(kq, ks), dequantized(vq, vs), table, q_lens, kv_lens, 0.25)
    for path in ("reference", "triton"):
        out = torch.full_like(query, float("nan"))
        with kernel_path(path):
            OPS.unified_attention(out, query, kq, vq, table, cu, seqused, 7, 40, 0.25, 0.0, 0, "int8", inner(ksbuf),
                                  inner(vsbuf))
        assert guards_intact(ksbuf) and guards_intact(vsbuf), path
        assert not out.isnan().any() and (out[int(cu[-2]):] == 0).all(), path
        torch.testing.assert_close(out.double(), formula, rtol=1e-5, atol=1e-5)
