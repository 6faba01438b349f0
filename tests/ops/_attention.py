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


def independent_attention(query, keys, values, q_lens, kv_lens, scale, softcap=0.0, window=0, causal=True,
                          key_ok=None):
    """fp64, one sequence at a time. keys/values: a list of [kv_len, KVH, D] per sequence; key_ok
    (a list of bool [kv_len], or None) hides the keys it marks False."""
    out = torch.zeros(query.shape, dtype=torch.float64)
    heads, start = query.shape[1], 0
    key_ok = key_ok or [None] * len(kv_lens)
    for q_len, kv_len, k, v, ok in zip(q_lens, kv_lens, keys, values, key_ok):
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
        if ok is not None:
            hidden = hidden | ~ok[None, :]
        p = torch.softmax(s.masked_fill(hidden, float("-inf")), -1).nan_to_num(0.0)
        out[rows] = torch.einsum("hqk,khd->qhd", p, v)
    return out


def paged_key_ok(table, kv_lens, num_blocks, block_size):
    """Per sequence, bool [kv_len]: key j's block id is in [0, num_blocks) (else it is hidden)."""
    return [torch.tensor([0 <= int(table[b, j // block_size]) < num_blocks for j in range(k)], dtype=torch.bool)
            for b, k in enumerate(kv_lens)]


def paged_keys(cache, table, kv_lens):
    """Each sequence's rows of a paged cache, read slot by slot; a row whose block id is outside
    [0, num_blocks) is 0 (paged_key_ok hides it)."""
    num_blocks, block_size = cache.shape[:2]

    def row(b, j):
        block = int(table[b, j // block_size])
        return cache[block, j % block_size] if 0 <= block < num_blocks else torch.zeros_like(cache[0, 0])

    return [torch.stack([row(b, j) for j in range(k)]) if k else cache[:0, 0] for b, k in enumerate(kv_lens)]


def paged_formula(query, kc, vc, table, q_lens, kv_lens, scale, softcap=0.0, window=0):
    """independent_attention over the rows of a paged cache (keys in bad blocks hidden)."""
    return independent_attention(query, paged_keys(kc, table, kv_lens), paged_keys(vc, table, kv_lens), q_lens,
                                 kv_lens, scale, softcap, window, key_ok=paged_key_ok(table, kv_lens, *kc.shape[:2]))


def corrupt_table(table, kv_lens, block_size, num_blocks):
    """A copy of table with bad block ids inside sequences' lengths, each kind in turn: num_blocks
    and num_blocks + 1 (past the end), -2 and -1 (negative). The i-th sequence with keys gets one
    at its block i (mod its block count); the last one gets them in every block, so its queries
    see no key at all."""
    kinds = [num_blocks, -2, num_blocks + 1, -1]
    bad = table.clone()
    with_keys = [b for b, k in enumerate(kv_lens) if k]
    for i, b in enumerate(with_keys):
        blocks = -(-kv_lens[b] // block_size)
        cols = range(blocks) if b == with_keys[-1] else [i % blocks]
        for j in cols:
            bad[b, j] = kinds[(i + j) % len(kinds)]
    return bad


def quantize_paged(key_cache, value_cache, static=None):
    """The int8 caches holding make_paged_batch's float caches, written by reshape_and_cache_flash
    with kv_cache_dtype "int8": (key int8, value int8, k_scale, v_scale). Dynamic (default): the
    scale caches [num_blocks, KVH, block_size], NaN in every unused slot; static=(k_scale, v_scale):
    those. Unused int8 slots hold random values (no NaN in int8)."""
    import ascendtile.ops as ak

    num_blocks, block_size, kv_heads, dim = key_cache.shape
    rows_k, rows_v = key_cache.reshape(-1, kv_heads, dim), value_cache.reshape(-1, kv_heads, dim)
    used = ~rows_k.isnan().flatten(1).all(1)  # unused slots are all NaN (a used row may hold one)
    kq = torch.randint(-127, 128, key_cache.shape, dtype=torch.int8)
    vq = torch.randint(-127, 128, key_cache.shape, dtype=torch.int8)
    if static is None:
        k_scale, v_scale = (torch.full((num_blocks, kv_heads, block_size), float("nan")) for _ in range(2))
        ak.reshape_and_cache_flash(rows_k[used], rows_v[used], kq, vq, torch.arange(num_blocks * block_size)[used],
                                   "int8", None, None, k_scale, v_scale)
    else:
        k_scale, v_scale = static
        ak.reshape_and_cache_flash(rows_k[used], rows_v[used], kq, vq, torch.arange(num_blocks * block_size)[used],
                                   "int8", k_scale, v_scale)
    return kq, vq, k_scale, v_scale


def dequantized(cache, scale):
    """fp64 values of a whole int8 cache [num_blocks, block_size, KVH, D]: a scale cache
    [num_blocks, KVH, block_size] or a static scale (one element or [KVH]) applied per row; the
    independent side of the int8 tests (the ops dequantize only the rows they gather)."""
    if scale.dim() == 3:
        return cache.double() * scale.double().transpose(1, 2)[..., None]
    return cache.double() * scale.double().reshape(-1)[:, None]
