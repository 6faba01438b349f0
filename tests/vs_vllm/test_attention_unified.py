"""unified_attention vs vLLM's CPU attention (torch.ops._C.cpu_attention_with_kv_cache, "vec" ISA, its
scheduler metadata from get_scheduler_metadata), same query, caches (ours put in vLLM's layout by
_cache_layout), block table, cu_seqlens_q / seq_lens, on both of our paths: one mixed batch of a
decode, a chunked prefill over cached context, a fresh prefill and a long decode, GQA 8:2; plain
causal, and with sliding window 8 plus softcap 30 (vLLM's kernel takes the window as the same
number: 8 keys including the query's own). The block table is -1 padded; in our caches the blocks
no sequence owns and the slots past each sequence's length hold NaN, which we must not read. vLLM
gets them as 0: it reads whole blocks (the scores past the length are masked, but a NaN value still
poisons its P·V sum).

vLLM's CPU attention needs block_size % 32 == 0 here (refused otherwise). Both compute in fp32
and round the output once; they differ in summation order and exp. The output is a convex
combination of value rows, so the distance is held relative to max|V|: |ours - vLLM| <= limit · eps
· max|V|. Measured over head sizes 64/80/128, batches of 3-5 sequences, against all three vLLM
builds; see _compare for the bf16 keys."""
import pytest
import torch

from vllm_kernels import bf16_rounds_nearest
from vs_vllm._cache_layout import ISA, to_vllm_cpu_caches
from vs_vllm._compare import DTYPES, PATHS, Bound, assert_relative, bound_for, dtype_id, on_path

HEADS, KV_HEADS, HEAD_SIZE, BLOCK_SIZE = 8, 2, 64, 32
Q_LENS, KV_LENS = [1, 5, 7, 1], [37, 20, 7, 64]  # decode, chunked prefill, prefill, decode
TABLE_WIDTH = 3

# (max |ours - vLLM| / (eps · max|V|), max share differing): measured maximum +10 %, shares +0.06.
# fp32 has no share bound: every output is a long sum, nearly all differ in the last bits.
ATTENTION = {
    torch.float32: Bound(16, 1.0),  # 14.5 (Triton 11.9)
    torch.float16: {"reference": Bound(0.3, 0.06), "triton": Bound(0.55, 0.21)},  # 0.26 / 0.005, Triton 0.49 / 0.14
    torch.bfloat16: {"NN": Bound(0.3, 0.06), "NT": Bound(1.0, 0.56), "TN": Bound(0.55, 0.65), "TT": Bound(0.55, 0.31)},
}


def _batch(dtype: torch.dtype):
    """query, our caches (NaN where no sequence's keys are), block table (-1 padded), cu_seqlens_q,
    seq_lens."""
    batch = len(Q_LENS)
    blocks = batch * TABLE_WIDTH + 2
    query = torch.randn(sum(Q_LENS), HEADS, HEAD_SIZE, dtype=dtype) * 2
    key_cache = torch.full((blocks, BLOCK_SIZE, KV_HEADS, HEAD_SIZE), float("nan"), dtype=dtype)
    value_cache = key_cache.clone()
    table = torch.full((batch, TABLE_WIDTH), -1, dtype=torch.int32)
    owned = torch.randperm(blocks)
    for seq, kv_len in enumerate(KV_LENS):
        used = -(-kv_len // BLOCK_SIZE)
        ids, owned = owned[:used], owned[used:]
        table[seq, :used] = ids.int()
        slots = (ids[:, None] * BLOCK_SIZE + torch.arange(BLOCK_SIZE)).flatten()[:kv_len]
        key_cache.view(-1, KV_HEADS, HEAD_SIZE)[slots] = torch.randn(kv_len, KV_HEADS, HEAD_SIZE, dtype=dtype) * 2
        value_cache.view(-1, KV_HEADS, HEAD_SIZE)[slots] = torch.randn(kv_len, KV_HEADS, HEAD_SIZE, dtype=dtype)
    cu_seqlens_q = torch.tensor([0, *torch.tensor(Q_LENS).cumsum(0).tolist()], dtype=torch.int32)
    return query, key_cache, value_cache, table, cu_seqlens_q, torch.tensor(KV_LENS, dtype=torch.int32)


@pytest.mark.parametrize("window_softcap", [(0, 0.0), (8, 30.0)], ids=["causal", "window_softcap"])
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_unified_attention(vllm_ops, dtype, path, window_softcap):
    window, softcap = window_softcap
    query, key_cache, value_cache, table, cu_seqlens_q, seq_lens = _batch(dtype)
    scale = HEAD_SIZE ** -0.5
    their_window = window or -1  # vLLM: -1 = no window
    metadata = vllm_ops.get_scheduler_metadata(len(Q_LENS), HEADS, KV_HEADS, HEAD_SIZE, seq_lens, dtype, cu_seqlens_q,
                                               True, their_window, ISA, False, None)
    theirs = torch.empty_like(query)
    their_caches = to_vllm_cpu_caches(key_cache.nan_to_num(0), value_cache.nan_to_num(0))
    vllm_ops.cpu_attention_with_kv_cache(query, *their_caches, theirs, cu_seqlens_q,
                                         seq_lens, scale, True, None, their_window, table, softcap, metadata, None, None)
    ours = on_path(path, torch.ops.ascend.unified_attention,
                   [torch.empty_like(query), query, key_cache, value_cache, table, cu_seqlens_q, seq_lens,
                    max(Q_LENS), max(KV_LENS), scale, softcap, window])[0]
    max_v = value_cache.float().nan_to_num(0).abs().max()
    bound = bound_for(ATTENTION, dtype, path, bf16_rounds_nearest())
    assert_relative(ours, theirs, max_v.expand(ours.shape), bound, "out")
