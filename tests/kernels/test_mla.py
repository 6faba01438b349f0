"""mla_attention: Triton kernel (interpreter) vs the torch reference on NaN-poisoned paged caches,
plus the FlashMLA-style cosine check against an independent fp64 formula."""
import pytest
import torch

from guarded import guarded, guards_intact, inner
from opchecks import kernel_path, run_both
from ops._attention import corrupt_table
from ops.test_mla import cos_diff, dequantized_latent, independent_mla, make_batch, quantize_latent
from tolerances import assert_close

import ascendtile.kernels.mla as mla_kernels

OPS = torch.ops.ascend

# decode; chunked prefill over cached context; lengths crossing block boundaries; an empty sequence;
# a long decode context (split-KV under the interpreter's 4 "cores"); a sequence with no new token.
CASES = {
    "decode": ([1, 1, 1], [1, 17, 40]),
    "mixed": ([3, 1, 5, 1], [19, 33, 5, 0]),
    "prefill": ([7], [7]),
    "long": ([1, 1], [300, 129]),
    "chunk_beside_decodes": ([9, 1, 0, 1], [20, 5, 3, 0]),
}


def _run(q_lens, kv_lens, heads, lora, rope, block_size, dtype, strided=False):
    query, cache, table, cu, seqused = make_batch(q_lens, kv_lens, heads, lora, rope, block_size, dtype)
    out = torch.empty(query.shape[0], heads, lora, dtype=dtype)
    if strided:  # padded rows: every stride but the last dim's is larger than the shape's
        query = torch.cat([query, torch.randn(*query.shape[:2], 5, dtype=dtype)], -1)[..., : lora + rope]
        cache = torch.cat([cache, torch.full((*cache.shape[:2], 3), float("nan"), dtype=dtype)], -1)[..., : lora + rope]
        out = torch.empty(query.shape[0], heads, lora + 4, dtype=dtype)[..., :lora]
    scale = (lora + rope) ** -0.5
    args = [out, query, cache, table, cu, seqused, max(q_lens), max(kv_lens), lora, scale]
    run_both(OPS.mla_attention, args, mutated=[0])
    return args


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("block_size", [16, 64])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_small_latent(case, block_size, dtype):
    _run(*CASES[case], heads=16, lora=128, rope=32, block_size=block_size, dtype=dtype)


@pytest.mark.parametrize("case", ["mixed", "long"])
def test_deepseek_latent_32_heads(case):
    _run(*CASES[case], heads=32, lora=512, rope=64, block_size=64, dtype=torch.float16)


def test_deepseek_latent_128_heads():  # ~1.5 s in the interpreter: no need to mark it slow
    _run([2, 1], [70, 33], heads=128, lora=512, rope=64, block_size=64, dtype=torch.bfloat16)



@pytest.mark.parametrize("heads", [20, 80])
def test_head_tiles_with_padding_rows(heads):
    # block_h_for takes up to 64 heads at L=128: 20 heads pad a 32-row tile, 80 leave a second
    # tile of 16 heads in 64 rows; padding rows must never be stored (a 128-key block: 128-key steps).
    assert mla_kernels.block_h_for(128, heads) == (32 if heads == 20 else 64)
    _run(*CASES["mixed"], heads=heads, lora=128, rope=32, block_size=128, dtype=torch.float16)

def test_block_size_not_a_power_of_two():  # 48: keys are stepped 16 at a time within a block
    _run(*CASES["mixed"], heads=16, lora=128, rope=32, block_size=48, dtype=torch.float32)


def test_strided_query_cache_and_out():
    _run([3, 1], [40, 17], heads=16, lora=128, rope=32, block_size=16, dtype=torch.float32, strided=True)


def test_split_kv_is_exercised_and_matches_independent_formula():
    q_lens, kv_lens = CASES["long"]
    assert mla_kernels.plan_splits(len(q_lens), max(kv_lens), 16, cores=4)[0] > 1
    query, cache, table, cu, seqused = make_batch(q_lens, kv_lens, 16, 128, 32, 16)
    out = torch.empty(2, 16, 128)
    with kernel_path("triton"):
        OPS.mla_attention(out, query, cache, table, cu, seqused, 1, 300, 128, 0.1147)
    expect = independent_mla(query, cache, table, cu, seqused, 128, 0.1147)
    assert cos_diff(out, expect) < 1e-5
    torch.testing.assert_close(out.double(), expect, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("max_seqlen_k", [200, 64])  # below the real 300: split and unsplit plans
def test_kernel_covers_every_key_when_max_seqlen_k_is_stale(max_seqlen_k):
    query, cache, table, cu, seqused = make_batch([1, 1], [300, 129], 16, 128, 32, 16)
    out = torch.empty(2, 16, 128)
    with kernel_path("triton"):
        OPS.mla_attention(out, query, cache, table, cu, seqused, 1, max_seqlen_k, 128, 0.1)
    expect = independent_mla(query, cache, table, cu, seqused, 128, 0.1)
    torch.testing.assert_close(out.double(), expect, rtol=1e-5, atol=1e-5)


def test_kernel_cosine_vs_independent_fp32():
    query, cache, table, cu, seqused = make_batch([3, 1, 5, 1], [19, 33, 5, 0], 16, 512, 64, 16)
    out = torch.empty(10, 16, 512)
    with kernel_path("triton"):
        OPS.mla_attention(out, query, cache, table, cu, seqused, 5, 33, 512, 0.1147)
    expect = independent_mla(query, cache, table, cu, seqused, 512, 0.1147)
    assert cos_diff(out, expect) < 1e-5 and not out.isnan().any()
    assert (out[9] == 0).all()  # the sequence with no keys


def test_kernel_576_wide_fp32_elementwise_vs_independent():
    """The real MLA width (512 latent + 64 rope) in fp32, element by element within the one
    table's fp32 tolerance, against the independent fp64 formula (not only cosine distance)."""
    query, cache, table, cu, seqused = make_batch([3, 1, 5, 1], [19, 33, 5, 0], 16, 512, 64, 16)
    out = torch.empty(10, 16, 512)
    with kernel_path("triton"):
        OPS.mla_attention(out, query, cache, table, cu, seqused, 5, 33, 512, 0.1147)
    expect = independent_mla(query, cache, table, cu, seqused, 512, 0.1147)
    assert_close(out, expect.to(torch.float32))


@pytest.mark.parametrize("q_lens,kv_lens", [CASES["mixed"], CASES["long"]])  # unsplit and split-KV
def test_bad_block_ids_hide_their_keys(q_lens, kv_lens):
    # Bad ids of each kind inside the sequences' lengths, the latent cache between NaN guard
    # blocks; the last sequence with keys has no valid block, so its rows are 0.
    query, cache, table, cu, seqused = make_batch(q_lens, kv_lens, 16, 128, 32, 16)
    table = corrupt_table(table, kv_lens, 16, cache.shape[0])
    buf = guarded(cache)
    expect = independent_mla(query, cache, table, cu, seqused, 128, 0.1)
    last = max(b for b, k in enumerate(kv_lens) if k)
    for path in ("reference", "triton"):
        out = torch.full((query.shape[0], 16, 128), float("nan"))
        with kernel_path(path):
            OPS.mla_attention(out, query, inner(buf), table, cu, seqused, max(q_lens), max(kv_lens), 128, 0.1)
        assert guards_intact(buf), path
        assert not out.isnan().any() and (out[int(cu[last]):int(cu[last + 1])] == 0).all(), path
        torch.testing.assert_close(out.double(), expect, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case,lora,rope,heads,dtype,static", [
    ("long", 128, 32, 16, torch.float32, False),  # split-KV
    ("mixed", 512, 64, 32, torch.bfloat16, False),
    ("chunk_beside_decodes", 128, 32, 20, torch.float16, True),  # padded head tile, static scale
])
def test_int8_cache(case, lora, rope, heads, dtype, static):
    """Over an int8 latent cache: kernel vs reference, and vs the fp64 formula over the dequantized
    cache (NaN scales in every unused slot)."""
    q_lens, kv_lens = CASES[case]
    query, cache, table, cu, seqused = make_batch(q_lens, kv_lens, heads, lora, rope, 16, dtype)
    quantized, kv_scale = quantize_latent(cache, lora, torch.tensor(0.03) if static else None)
    scale = (lora + rope) ** -0.5
    out = torch.empty(query.shape[0], heads, lora, dtype=dtype)
    args = [out, query, quantized, table, cu, seqused, max(q_lens), max(kv_lens), lora, scale, "int8", kv_scale]
    run_both(OPS.mla_attention, args, mutated=[0])
    with kernel_path("triton"):
        OPS.mla_attention(*args)
    assert not out.isnan().any()
    expect = independent_mla(query, dequantized_latent(quantized, kv_scale, lora), table, cu, seqused, lora, scale)
    assert cos_diff(out, expect) < (1e-5 if dtype == torch.float32 else 1e-4)
