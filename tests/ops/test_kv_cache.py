"""reshape_and_cache_flash / concat_and_cache_mla, the op contract: reference vs an independent
per-token loop, opcheck and torch.compile on both kernel paths, functional wrappers and bad inputs;
the int8 cache (kv_cache_dtype "int8", ops/_kv_quant.py) against its defining properties, row by
row in fp64. (Triton kernel vs reference numerics: tests/kernels/test_kv_cache.py.)"""
import pytest
import torch

import ascendtile.ops as ak
from opchecks import compiles, op_contract_tests, raises_naming

OPS = torch.ops.ascend
ONE = torch.ones((), dtype=torch.float32)


def _slots(tokens: int, num_blocks: int, block_size: int, dtype=torch.int64) -> torch.Tensor:
    slots = torch.randperm(num_blocks * block_size)[:tokens]
    slots[::3] = -1  # padding tokens
    return slots.to(dtype)


def _expected_cache(cache: torch.Tensor, rows: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """One token at a time, by flat slot index into [num_blocks * block_size, ...]."""
    flat = cache.clone().reshape(-1, *cache.shape[2:])
    for t, slot in enumerate(slots.tolist()):
        if slot >= 0:
            flat[slot] = rows[t]
    return flat.reshape(cache.shape)


@pytest.mark.parametrize("slot_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_flash_reference_matches_loop(slot_dtype, dtype):
    tokens, blocks, bs, heads, dim = 13, 5, 16, 2, 64
    key, value = torch.randn(tokens, heads, dim, dtype=dtype), torch.randn(tokens, heads, dim, dtype=dtype)
    key_cache = torch.full((blocks, bs, heads, dim), float("nan"), dtype=dtype)
    value_cache = torch.full_like(key_cache, float("nan"))
    slots = _slots(tokens, blocks, bs, slot_dtype)
    expect_k, expect_v = _expected_cache(key_cache, key, slots), _expected_cache(value_cache, value, slots)
    ak.reshape_and_cache_flash(key, value, key_cache, value_cache, slots)
    torch.testing.assert_close(key_cache, expect_k, rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(value_cache, expect_v, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("slots", [[-1, 37, 5, -1, 80, 2], [-1, -1, -1], [-1, 9], [12], [79, 10_000, -7]])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_flash_traceable_matches_loop(slots, dtype):
    """The decode graph's form (compilation/decompose.py), which redirects skipped tokens instead of
    leaving them out: the same caches as the per-token loop, NaN-poisoned slots untouched, for
    padding first, only padding (every token rewrites slot 0 with its own value), one token and
    out-of-range slots; key/value strided, with rows past slot_mapping."""
    from ascendtile.ops.reference.kv_cache import reshape_and_cache_flash_traceable

    blocks, bs, heads, dim = 5, 16, 2, 24
    slots = torch.tensor(slots)
    qkv = torch.randn(len(slots) + 2, 3 * heads, dim, dtype=dtype)
    key, value = qkv[:, heads:2 * heads], qkv[:, 2 * heads:]
    key_cache = torch.full((blocks, bs, heads, dim), float("nan"), dtype=dtype)
    key_cache[0, 0] = 3.0  # slot 0 holds a value: a batch of padding rewrites it unchanged
    value_cache = key_cache.clone()
    in_range = torch.where((slots >= 0) & (slots < blocks * bs), slots, -1)
    expect_k, expect_v = _expected_cache(key_cache, key, in_range), _expected_cache(value_cache, value, in_range)
    reshape_and_cache_flash_traceable(key, value, key_cache, value_cache, slots, "auto", ONE, ONE)
    torch.testing.assert_close(key_cache, expect_k, rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(value_cache, expect_v, rtol=0, atol=0, equal_nan=True)
    with pytest.raises(ValueError, match="^kv_cache_dtype: the traceable KV write takes float caches"):
        reshape_and_cache_flash_traceable(key, value, key_cache, value_cache, slots, "int8", ONE, ONE)


@pytest.mark.parametrize("k_pe_3d", [False, True])
def test_mla_reference_matches_loop(k_pe_3d):
    tokens, blocks, bs = 9, 3, 16
    latent = torch.randn(tokens, 512 + 64 + 40)  # kv_c and k_pe are slices of one projection
    kv_c, k_pe = latent[:, :512], latent[:, 512:576]
    k_pe = k_pe.unsqueeze(1) if k_pe_3d else k_pe
    cache = torch.full((blocks, bs, 576), float("nan"))
    slots = _slots(tokens, blocks, bs)
    expect = _expected_cache(cache, latent[:, :576], slots)
    ak.concat_and_cache_mla(kv_c, k_pe, cache, slots)
    torch.testing.assert_close(cache, expect, rtol=0, atol=0, equal_nan=True)


def test_flash_slot_mapping_shorter_than_key():
    # Graph-padded batches: key has more rows than slot_mapping; the extra rows are ignored.
    key = torch.randn(6, 1, 64)
    cache = torch.zeros(2, 16, 1, 64)
    ak.reshape_and_cache_flash(key, key, cache, cache.clone(), torch.tensor([0, 1, 2, 3]))
    assert torch.equal(cache[0, :4], key[:4]) and not cache[0, 4:].any()


def _flash_args():
    key, value = torch.randn(5, 2, 64), torch.randn(5, 2, 64)
    cache = torch.zeros(3, 16, 2, 64)
    return [key, value, cache, cache.clone(), torch.tensor([3, -1, 40, 0, 17]), "auto", ONE, ONE]


def _mla_args():
    return [torch.randn(5, 64), torch.randn(5, 32), torch.zeros(3, 16, 96), torch.tensor([3, -1, 40, 0, 17], dtype=torch.int32), "auto", ONE]


def _flash_int8_args():
    key, value, kc, _, slots, _, s, _ = _flash_args()
    cache = torch.zeros(kc.shape, dtype=torch.int8)
    return [key, value, cache, cache.clone(), slots, "int8", s, s, torch.zeros(3, 2, 16), torch.zeros(3, 2, 16)]


def _mla_int8_args():
    kv_c, k_pe, cache, slots, _, s = _mla_args()
    return [kv_c, k_pe, torch.zeros(cache.shape, dtype=torch.int8), slots, "int8", s, torch.zeros(3, 2, 16)]


test_opcheck, test_compile = op_contract_tests({"reshape_and_cache_flash": _flash_args,
                                                "concat_and_cache_mla": _mla_args,
                                                "reshape_and_cache_flash:int8": _flash_int8_args,
                                                "concat_and_cache_mla:int8": _mla_int8_args})


def test_wrappers_compile():
    def fn(key, value, key_cache, value_cache, slots, kv_c, k_pe, mla_cache, mla_slots):
        ak.reshape_and_cache_flash(key, value, key_cache, value_cache, slots)
        ak.concat_and_cache_mla(kv_c, k_pe, mla_cache, mla_slots)
        return key_cache.sum() + value_cache.sum() + mla_cache.sum()

    flash, mla = _flash_args(), _mla_args()
    compiles(fn, *flash[:5], *mla[:4])


def test_bad_inputs_flash(values_checked):
    key, value, kc, vc, slots, _, s, _ = _flash_args()
    op = OPS.reshape_and_cache_flash
    raises_naming(TypeError, "key", op, key.int(), value, kc, vc, slots, "auto", s, s)
    raises_naming(TypeError, "value", op, key, value.half(), kc, vc, slots, "auto", s, s)
    raises_naming(TypeError, "key_cache", op, key, value, kc.half(), vc, slots, "auto", s, s)
    raises_naming(ValueError, "value", op, key, value[:, :1], kc, vc, slots, "auto", s, s)
    raises_naming(ValueError, "key_cache", op, key, value, torch.zeros(3, 16, 2, 32), vc, slots, "auto", s, s)
    raises_naming(ValueError, "value_cache", op, key, value, kc, torch.zeros(4, 16, 2, 64), slots, "auto", s, s)
    raises_naming(ValueError, "key", op, torch.randn(5, 128, 2).transpose(1, 2), value, kc, vc, slots, "auto", s, s)
    raises_naming(ValueError, "key_cache", op, key, value, torch.zeros(3, 16, 64, 2).transpose(2, 3), vc, slots, "auto", s, s)
    raises_naming(TypeError, "slot_mapping", op, key, value, kc, vc, slots.float(), "auto", s, s)
    raises_naming(ValueError, "slot_mapping", op, key, value, kc, vc, torch.zeros(6, dtype=torch.int64), "auto", s, s)
    raises_naming(ValueError, "kv_cache_dtype", op, key, value, kc, vc, slots, "fp8", s, s)
    raises_naming(ValueError, "k_scale", op, key, value, kc, vc, slots, "auto", torch.ones(3), s)  # 2 KV heads
    raises_naming(ValueError, "v_scale", op, key, value, kc, vc, slots, "auto", s, torch.ones(2, 1))
    raises_naming(TypeError, "v_scale", op, key, value, kc, vc, slots, "auto", s, torch.ones((), dtype=torch.float16))
    raises_naming(ValueError, "slot_mapping", op, key, value, kc, vc, slots.to("meta"), "auto", s, s)
    raises_naming(ValueError, "key_cache", op, key, value, kc.to("meta"), vc, slots, "auto", s, s)


@pytest.mark.parametrize("path", ["reference", "triton"])
def test_flash_per_head_scales(path, monkeypatch):
    """vLLM's per-head k/v scales [num_kv_heads] are accepted beside per-tensor ones; with the
    "auto" cache dtype both store the values as they are."""
    monkeypatch.setenv("ASCENDTILE_KERNELS", path)
    key, value, kc, vc, slots, _, s, _ = _flash_args()
    OPS.reshape_and_cache_flash(key, value, kc, vc, slots, "auto", s, s)
    per_head_k, per_head_v = kc.new_zeros(kc.shape), vc.new_zeros(vc.shape)
    OPS.reshape_and_cache_flash(key, value, per_head_k, per_head_v, slots, "auto", torch.full((2,), 0.5),
                                torch.full((2,), 2.0))
    assert kc.any() and torch.equal(per_head_k, kc) and torch.equal(per_head_v, vc)


def test_bad_inputs_mla(values_checked):
    kv_c, k_pe, cache, slots, _, s = _mla_args()
    op = OPS.concat_and_cache_mla
    raises_naming(TypeError, "kv_c", op, kv_c.long(), k_pe, cache, slots, "auto", s)
    raises_naming(TypeError, "k_pe", op, kv_c, k_pe.half(), cache, slots, "auto", s)
    raises_naming(ValueError, "kv_cache", op, kv_c, k_pe, torch.zeros(3, 16, 100), slots, "auto", s)
    raises_naming(ValueError, "k_pe", op, kv_c, k_pe[:4], cache, slots, "auto", s)
    raises_naming(ValueError, "k_pe", op, kv_c, torch.randn(5, 2, 16), cache, slots, "auto", s)
    raises_naming(ValueError, "kv_c", op, torch.randn(64, 5).t(), k_pe, cache, slots, "auto", s)
    raises_naming(ValueError, "kv_cache_dtype", op, kv_c, k_pe, cache, slots, "fp8", s)
    raises_naming(ValueError, "slot_mapping", op, kv_c, k_pe, cache, slots.view(5, 1), "auto", s)
    raises_naming(ValueError, "kv_cache", op, kv_c, k_pe, cache.to("meta"), slots, "auto", s)


def test_bad_input_writes_nothing(triton_path):
    key, value, kc, vc, slots, _, s, _ = _flash_args()
    with pytest.raises(ValueError):
        OPS.reshape_and_cache_flash(key, value, kc, vc, slots, "fp8_e4m3", s, s)
    assert not kc.any() and not vc.any()
    kv_c, k_pe, cache, slots, _, s = _mla_args()
    with pytest.raises(ValueError):
        OPS.concat_and_cache_mla(kv_c, k_pe, cache, slots, "auto", torch.ones(3))
    assert not cache.any()


@pytest.mark.parametrize("path", ["reference", "triton"])
def test_check_indices_switch(path, monkeypatch):
    # 3 blocks × 16 slots: 48 is one past the end, -2 is negative but not the padding marker.
    key, value, kc, vc, slots, _, s, _ = _flash_args()
    kv_c, k_pe, cache, mla_slots, _, _ = _mla_args()
    monkeypatch.setenv("ASCENDTILE_KERNELS", path)
    monkeypatch.setenv("ASCENDTILE_CHECK_INDICES", "1")
    for bad in (48, -2):
        flash_slots, latent_slots = slots.clone(), mla_slots.clone()
        flash_slots[2] = latent_slots[4] = bad
        with pytest.raises(ValueError, match=rf"^slot_mapping: entry 2 is {bad}, outside \[0, 48\)"):
            OPS.reshape_and_cache_flash(key, value, kc, vc, flash_slots, "auto", s, s)
        with pytest.raises(ValueError, match=rf"^slot_mapping: entry 4 is {bad}, outside \[0, 48\)"):
            OPS.concat_and_cache_mla(kv_c, k_pe, cache, latent_slots, "auto", s)
    assert not kc.any() and not vc.any() and not cache.any()  # nothing written
    OPS.reshape_and_cache_flash(key, value, kc, vc, slots, "auto", s, s)  # in range, -1 padding: accepted
    compiles(lambda c, sl: OPS.concat_and_cache_mla(kv_c, k_pe, c, sl, "auto", s) or c, cache, mla_slots)
    monkeypatch.setenv("ASCENDTILE_CHECK_INDICES", "0")  # off: skipped, not raised
    OPS.reshape_and_cache_flash(key, value, kc, vc, flash_slots, "auto", s, s)


def _check_dynamic_rows(x, q, scale):
    """Each row of x [N, D] against its int8 row q and scale, in fp64: scale = max|x| / 127 (to
    fp32 rounding), |q| <= 127 with 127 reached, |q·scale - x| <= scale / 2 (round to nearest);
    a zero row: scale 0, q 0; a row with NaN/inf: scale NaN, q 0."""
    x, qd, sd = x.double(), q.double(), scale.double()
    finite = x.isfinite().all(-1)
    assert sd[~finite].isnan().all() and (q[~finite] == 0).all()
    x, qd, sd = x[finite], qd[finite], sd[finite]
    amax = x.abs().amax(-1)
    torch.testing.assert_close(sd, amax / 127, rtol=2e-7, atol=0)
    assert (qd.abs() <= 127).all() and (qd.abs().amax(-1)[amax > 0] == 127).all()
    assert (qd[amax == 0] == 0).all() and (sd[amax == 0] == 0).all()
    assert ((qd * sd[:, None] - x).abs() <= sd[:, None] * (0.5 + 1e-5)).all()


def _special_rows(x):
    """x [T, H, D] with a zero row, a NaN, an inf and a huge-valued row."""
    x[1, 0] = 0.0
    x[2, -1, 3] = float("nan")
    x[4, 0, 0] = float("-inf")
    x[5, -1] *= 1e30
    return x


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_int8_dynamic_flash_rows(dtype):
    """The dynamic int8 write, token by token: each (token, head) row's int8 values and its scale in
    the scale cache [num_blocks, KVH, block_size] at the slot; every slot not written keeps its NaN
    scale and its old int8 values; padding (-1) and slots past the cache are skipped."""
    tokens, blocks, bs, heads, dim = 13, 5, 16, 3, 40  # odd head count and head size
    key = _special_rows(torch.randn(tokens, heads, dim).to(dtype))
    value = torch.randn(tokens, heads, dim).to(dtype) * 3
    slots = _slots(tokens, blocks, bs)
    slots[6] = blocks * bs  # past the end: skipped
    old = torch.randint(-127, 128, (blocks, bs, heads, dim), dtype=torch.int8)
    kc, vc = old.clone(), old.clone()
    ks, vs = torch.full((blocks, heads, bs), float("nan")), torch.full((blocks, heads, bs), float("nan"))
    ak.reshape_and_cache_flash(key, value, kc, vc, slots, "int8", None, None, ks, vs)
    written = torch.zeros(blocks * bs, dtype=torch.bool)
    for t, slot in enumerate(slots.tolist()):
        if 0 <= slot < blocks * bs:
            written[slot] = True
            b, o = divmod(slot, bs)
            _check_dynamic_rows(key[t], kc[b, o], ks[b, :, o])
            _check_dynamic_rows(value[t], vc[b, o], vs[b, :, o])
    flat_old = old.reshape(blocks * bs, -1)
    for cache, scale in ((kc, ks), (vc, vs)):
        assert torch.equal(cache.reshape(blocks * bs, -1)[~written], flat_old[~written])
        assert scale.transpose(1, 2).reshape(blocks * bs, heads)[~written].isnan().all()


def test_int8_static_flash_and_mla():
    """Static scales: x / scale rounded half to even and saturated to ±127, NaN stored as 0; per KV
    head [KVH] or one for all; MLA's one scale over both parts."""
    tokens, blocks, bs, heads, dim = 6, 2, 16, 2, 24
    key = _special_rows(torch.randn(tokens, heads, dim))
    key[0, 0, :4] = torch.tensor([0.25, 0.75, -0.25, 1.25])  # ties at scale 0.5: 0.5, 1.5, -0.5, 2.5 -> 0, 2, 0, 2
    slots = torch.tensor([0, 17, -1, 5, 30, 9])
    kc, vc = torch.zeros(blocks, bs, heads, dim, dtype=torch.int8), torch.zeros(blocks, bs, heads, dim, dtype=torch.int8)
    k_scale, v_scale = torch.tensor([0.5, 0.01]), torch.tensor(0.02)
    ak.reshape_and_cache_flash(key, 2 * key, kc, vc, slots, "int8", k_scale, v_scale)
    assert kc[0, 0, 0, :4].tolist() == [0, 2, 0, 2]
    for t, slot in enumerate(slots.tolist()):
        if slot < 0:
            continue
        for cache, x, scale in ((kc, key[t], k_scale[:, None]), (vc, 2 * key[t], v_scale)):
            expect = torch.round(x.double() / scale).nan_to_num(0.0).clamp(-127, 127)
            assert torch.equal(cache[slot // bs, slot % bs].double(), expect), t
    kv_c, k_pe = torch.randn(4, 48) * 3, torch.randn(4, 16)
    kv_c[1, 0] = float("nan")
    cache = torch.zeros(2, 16, 64, dtype=torch.int8)
    ak.concat_and_cache_mla(kv_c, k_pe, cache, torch.tensor([3, 20, -1, 0]), "int8", torch.tensor(0.02))
    for t, slot in ((0, 3), (1, 20), (3, 0)):
        row = torch.cat((kv_c[t], k_pe[t])).double()
        assert torch.equal(cache[slot // 16, slot % 16].double(), torch.round(row / 0.02).nan_to_num(0.0).clamp(-127, 127))


def test_int8_dynamic_mla_rows():
    """The latent and the rope part of each token get their own scale: scale cache rows 0 and 1."""
    tokens, blocks, bs, rank, rope = 9, 3, 16, 80, 24
    latent = torch.randn(tokens, rank + rope + 8)
    latent[:, rank:rank + rope] *= 40  # rope values far larger than the latent's
    latent[3, :rank] = 0.0
    latent[5, rank + 2] = float("nan")
    kv_c, k_pe = latent[:, :rank], latent[:, rank:rank + rope]  # strided rows
    cache = torch.zeros(blocks, bs, rank + rope, dtype=torch.int8)
    scales = torch.full((blocks, 2, bs), float("nan"))
    slots = _slots(tokens, blocks, bs)
    ak.concat_and_cache_mla(kv_c, k_pe, cache, slots, "int8", None, scales)
    for t, slot in enumerate(slots.tolist()):
        if slot >= 0:
            b, o = divmod(slot, bs)
            _check_dynamic_rows(kv_c[t:t + 1], cache[b, o:o + 1, :rank], scales[b, 0, o:o + 1])
            _check_dynamic_rows(k_pe[t:t + 1], cache[b, o:o + 1, rank:], scales[b, 1, o:o + 1])
    written = torch.zeros(blocks * bs, dtype=torch.bool)
    written[slots[slots >= 0]] = True
    assert scales.transpose(1, 2).reshape(-1, 2)[~written].isnan().all()  # unwritten slots keep their NaN


def test_bad_inputs_int8(values_checked):
    key, value, kc, vc, slots, _, s, _ = _flash_args()
    qc, qv = torch.zeros(kc.shape, dtype=torch.int8), torch.zeros(kc.shape, dtype=torch.int8)
    sc = torch.zeros(3, 2, 16)
    op = OPS.reshape_and_cache_flash
    raises_naming(TypeError, "key_cache", op, key, value, kc, vc, slots, "int8", s, s)  # float caches
    raises_naming(TypeError, "key_cache", op, key, value, qc, qv, slots, "auto", s, s)  # int8 caches, "auto"
    raises_naming(TypeError, "value_cache", op, key, value, qc, vc, slots, "int8", s, s)
    raises_naming(ValueError, "kv_cache_dtype", op, key, value, qc, qv, slots, "fp8_e4m3", s, s)
    raises_naming(ValueError, "k_scale_cache", op, key, value, kc, vc, slots, "auto", s, s, sc, sc)
    raises_naming(ValueError, "v_scale_cache", op, key, value, qc, qv, slots, "int8", s, s, sc, None)
    raises_naming(ValueError, "k_scale_cache", op, key, value, qc, qv, slots, "int8", s, s, torch.zeros(3, 16, 2), sc)
    raises_naming(ValueError, "v_scale_cache", op, key, value, qc, qv, slots, "int8", s, s, sc,
                  torch.zeros(3, 16, 2).transpose(1, 2))  # the right shape, not contiguous
    raises_naming(TypeError, "k_scale_cache", op, key, value, qc, qv, slots, "int8", s, s, sc.half(), sc)
    raises_naming(ValueError, "k_scale", op, key, value, qc, qv, slots, "int8", torch.ones(3), s)  # 2 KV heads
    raises_naming(ValueError, "k_scale_cache", op, key, value, qc, qv, slots, "int8", s, s, sc.to("meta"), sc)
    kv_c, k_pe, cache, mla_slots, _, _ = _mla_args()
    mla = OPS.concat_and_cache_mla
    qm = torch.zeros(cache.shape, dtype=torch.int8)
    raises_naming(TypeError, "kv_cache", mla, kv_c, k_pe, cache, mla_slots, "int8", s, sc)
    raises_naming(ValueError, "scale_cache", mla, kv_c, k_pe, qm, mla_slots, "int8", s, torch.zeros(3, 16, 2))
    raises_naming(ValueError, "scale_cache", mla, kv_c, k_pe, cache, mla_slots, "auto", s, sc)
    raises_naming(ValueError, "scale", mla, kv_c, k_pe, qm, mla_slots, "int8", torch.ones(2))
