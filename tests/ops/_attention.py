"""Shared by the attention families' tests (tests/ops/test_attention_*.py and
tests/kernels/test_attention_*.py): random paged batches and an independent per-sequence fp64
attention formula."""
import torch


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


def paged_formula(query, kc, vc, table, q_lens, kv_lens, scale, softcap=0.0, window=0):
    """independent_attention over the rows of a paged cache."""
    return independent_attention(query, paged_keys(kc, table, kv_lens), paged_keys(vc, table, kv_lens), q_lens,
                                 kv_lens, scale, softcap, window)
