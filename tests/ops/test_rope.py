"""rotary_embedding, the op contract: reference vs an independent complex-number formula and HF's
rotate_half, vLLM's 2-D positions form ([B, S]) vs the flattened tokens, the rotated span at
rope_dim_offset and inverse rotation (vs the formula, and a round trip), opcheck and torch.compile
on both kernel paths, the functional wrapper and bad inputs.
(Triton kernel vs reference numerics: tests/kernels/test_rope.py.)"""
import pytest
import torch
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

import ascendtile.ops as ak
from opchecks import compiles, op_contract_tests, raises_naming
from tolerances import assert_close

OPS = torch.ops.ascend


def _cache(max_pos: int, rot_dim: int, base: float = 10000.0) -> torch.Tensor:
    inv_freq = base ** (-torch.arange(0, rot_dim, 2, dtype=torch.float64) / rot_dim)
    theta = torch.arange(max_pos, dtype=torch.float64)[:, None] * inv_freq
    return torch.cat((theta.cos(), theta.sin()), -1).float()


def _complex_rope(x, positions, cache, head_size, is_neox, offset=0, inverse=False):
    """Rotation as complex multiplication in fp64: z · e^{iθ} (inverse: z · conj(e^{iθ})) on the
    (x1, x2) pairs of dims [offset, offset + rot_dim) of each head."""
    heads = x.double().reshape(x.shape[0], -1, head_size).clone()
    half = cache.shape[1] // 2
    rot = heads[..., offset : offset + 2 * half]
    if is_neox:
        z = torch.complex(rot[..., :half], rot[..., half:])
    else:
        z = torch.complex(rot[..., 0::2], rot[..., 1::2])
    c = cache.double()[positions.long()]
    e = torch.complex(c[:, None, :half], c[:, None, half:])
    z = z * (e.conj() if inverse else e)
    if is_neox:
        rot[..., :half], rot[..., half:] = z.real, z.imag
    else:
        rot[..., 0::2], rot[..., 1::2] = z.real, z.imag
    return heads.reshape(x.shape)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("is_neox", [True, False])
@pytest.mark.parametrize("head_size,rot_dim", [(64, 64), (128, 64), (192, 64), (80, 80)])
def test_reference_matches_complex_formula(dtype, is_neox, head_size, rot_dim):
    tokens, positions = 11, torch.randint(0, 8192, (11,))
    cache = _cache(8192, rot_dim)
    q = torch.randn(tokens, 3 * head_size, dtype=dtype)
    k = torch.randn(tokens, 1, head_size, dtype=dtype)
    expect_q = _complex_rope(q, positions, cache, head_size, is_neox).to(dtype)
    expect_k = _complex_rope(k, positions, cache, head_size, is_neox).to(dtype)
    got_q, got_k = ak.rotary_embedding(positions, q, k, head_size, cache, is_neox)
    assert_close(got_q, expect_q, atol=2e-5) if dtype == torch.float32 else assert_close(got_q, expect_q)
    assert_close(got_k, expect_k, atol=2e-5) if dtype == torch.float32 else assert_close(got_k, expect_k)


def test_neox_matches_hf_apply_rotary_pos_emb():
    positions = torch.tensor([0, 5, 4097, 8191])
    cache = _cache(8192, 128)
    q, k = torch.randn(4, 4, 128), torch.randn(4, 2, 128)
    cos, sin = cache[positions].chunk(2, -1)
    hf_q, hf_k = apply_rotary_pos_emb(q.transpose(0, 1), k.transpose(0, 1), torch.cat((cos, cos), -1), torch.cat((sin, sin), -1), unsqueeze_dim=0)
    ak.rotary_embedding(positions, q, k, 128, cache, True)
    assert_close(q, hf_q.transpose(0, 1), atol=2e-5)
    assert_close(k, hf_k.transpose(0, 1), atol=2e-5)


def test_partial_rotary_leaves_tail_and_strided_rows():
    qkv = torch.randn(7, 2 * 192 + 100)
    q = qkv[:, : 2 * 192]  # a slice of a fused projection: strided token rows
    before = qkv.clone()
    ak.rotary_embedding(torch.arange(7, dtype=torch.int32), q, None, 192, _cache(16, 64), False)
    heads, old = qkv[:, :384].view(7, 2, 192), before[:, :384].view(7, 2, 192)
    assert torch.equal(heads[..., 64:], old[..., 64:])
    assert torch.equal(qkv[:, 384:], before[:, 384:])
    assert torch.equal(heads[0], old[0])  # position 0 is the identity
    assert not torch.equal(heads[1:, :, :64], old[1:, :, :64])


@pytest.mark.parametrize("is_neox", [True, False])
@pytest.mark.parametrize("with_key", [True, False])
def test_2d_positions_match_flattened_tokens(is_neox, with_key):
    # vLLM's [B, S] form: query [B, S, H*D], key [B, S, H, D]; the same as the B*S tokens flattened.
    batch, seq, head_size = 3, 5, 64
    positions = torch.randint(0, 16, (batch, seq))
    cache = _cache(16, 32)
    q, k = torch.randn(batch, seq, 4 * head_size), torch.randn(batch, seq, 2, head_size)
    flat_q, flat_k = q.reshape(batch * seq, -1).clone(), k.reshape(batch * seq, 2, head_size).clone()
    expect_q = _complex_rope(flat_q, positions.flatten(), cache, head_size, is_neox).float().view(q.shape)
    expect_k = _complex_rope(flat_k, positions.flatten(), cache, head_size, is_neox).float().view(k.shape)
    ak.rotary_embedding(positions.flatten(), flat_q, flat_k if with_key else None, head_size, cache, is_neox)
    key = k if with_key else None
    got_q, got_k = ak.rotary_embedding(positions, q, key, head_size, cache, is_neox)
    assert got_q is q and got_k is key
    assert torch.equal(q, flat_q.view(q.shape))
    assert_close(q, expect_q, atol=2e-5)
    if with_key:
        assert torch.equal(k, flat_k.view(k.shape))
        assert_close(k, expect_k, atol=2e-5)


@pytest.mark.parametrize("path", ["reference", "triton"])
def test_2d_positions_strided_fused_qkv(path, monkeypatch):
    # q and k slices of a fused qkv [B, S+2, W] whose batch rows hold 2 extra tokens: token stride
    # W, batch stride (S+2)*W, so neither flattens to [B*S, ...] as a view. v, the padding columns
    # and the extra tokens stay untouched.
    monkeypatch.setenv("ASCENDTILE_KERNELS", path)
    batch, seq, head_size, nq, nk = 2, 3, 64, 3, 1
    width = (nq + 2 * nk) * head_size + 8
    qkv = torch.randn(batch, seq + 2, width)
    before = qkv.clone()
    positions = torch.randint(0, 16, (batch, seq))
    cache = _cache(16, 64)
    q = qkv[:, :seq, : nq * head_size]
    k = qkv[:, :seq, nq * head_size : (nq + nk) * head_size].unflatten(-1, (nk, head_size))
    ak.rotary_embedding(positions, q, k, head_size, cache, False)
    for b in range(batch):
        for x, start, heads in ((q, 0, nq), (k, nq * head_size, nk)):
            old = before[b, :seq, start : start + heads * head_size]
            expect = _complex_rope(old, positions[b], cache, head_size, False).float()
            assert_close(x[b].reshape(seq, -1), expect, atol=2e-5)
    assert torch.equal(qkv[:, :, (nq + nk) * head_size :], before[:, :, (nq + nk) * head_size :])
    assert torch.equal(qkv[:, seq:], before[:, seq:])


@pytest.mark.parametrize("path", ["reference", "triton"])
def test_2d_out_of_range_position_leaves_its_token(path, monkeypatch):
    monkeypatch.setenv("ASCENDTILE_KERNELS", path)
    positions, cache = torch.tensor([[3, 16, 1], [-1, 7, 0]]), _cache(16, 32)
    q, k = torch.randn(2, 3, 2, 64), torch.randn(2, 3, 64)
    q0, k0 = q.clone(), k.clone()
    OPS.rotary_embedding(positions, q, k, 64, cache, True)
    for b, s in ((0, 1), (1, 0)):
        assert torch.equal(q[b, s], q0[b, s]) and torch.equal(k[b, s], k0[b, s])
    b, s = 1, 1
    assert_close(q[b, s], _complex_rope(q0[b, s][None], positions[b, s][None], cache, 64, True)[0].float(), atol=2e-5)
    monkeypatch.setenv("ASCENDTILE_CHECK_INDICES", "1")
    with pytest.raises(ValueError, match=r"^positions: entry \[0, 1\] is 16, outside \[0, 16\)"):
        OPS.rotary_embedding(positions, q, k, 64, cache, True)


@pytest.mark.parametrize("path", ["reference", "triton"])
@pytest.mark.parametrize("is_neox", [True, False])
@pytest.mark.parametrize("inverse", [False, True])
def test_offset_and_inverse_match_complex_formula(path, is_neox, inverse, monkeypatch):
    # Heads of 96 rotating 32 dims at offset 40: 40 pass-through dims before the span, 24 after;
    # and 80 rotating the last 48 (offset 32, DeepSeek-V4's form). 1-D positions with key [T, H*D],
    # 2-D positions with key None.
    monkeypatch.setenv("ASCENDTILE_KERNELS", path)
    for head_size, rot_dim, offset in ((96, 32, 40), (80, 48, 32)):
        cache = _cache(16, rot_dim)
        positions = torch.randint(1, 16, (6,))
        q, k = torch.randn(6, 3, head_size), torch.randn(6, 2 * head_size)
        q0, k0 = q.clone(), k.clone()
        ak.rotary_embedding(positions, q, k, head_size, cache, is_neox, offset, inverse)
        for got, old in ((q, q0), (k, k0)):
            expect = _complex_rope(old, positions, cache, head_size, is_neox, offset, inverse).float()
            assert_close(got, expect, atol=2e-5)
            heads, old_heads = got.view(6, -1, head_size), old.view(6, -1, head_size)
            assert torch.equal(heads[..., :offset], old_heads[..., :offset])
            assert torch.equal(heads[..., offset + rot_dim :], old_heads[..., offset + rot_dim :])
        q2d = torch.randn(2, 3, 2 * head_size)  # [B, S, H*D]
        before = q2d.clone()
        ak.rotary_embedding(positions.view(2, 3), q2d, None, head_size, cache, is_neox, rope_dim_offset=offset,
                            inverse=inverse)
        expect = _complex_rope(before.view(6, -1), positions, cache, head_size, is_neox, offset, inverse)
        assert_close(q2d, expect.float().view(q2d.shape), atol=2e-5)


@pytest.mark.parametrize("path", ["reference", "triton"])
@pytest.mark.parametrize("is_neox", [True, False])
def test_inverse_undoes_rotation(path, is_neox, monkeypatch):
    monkeypatch.setenv("ASCENDTILE_KERNELS", path)
    cache = _cache(4096, 64)
    positions = torch.randint(0, 4096, (2, 4))
    q, k = torch.randn(2, 4, 3, 128), torch.randn(2, 4, 1, 128)
    q0, k0 = q.clone(), k.clone()
    ak.rotary_embedding(positions, q, k, 128, cache, is_neox, 64)
    assert not torch.allclose(q, q0)
    ak.rotary_embedding(positions, q, k, 128, cache, is_neox, 64, True)
    assert_close(q, q0, atol=1e-5)
    assert_close(k, k0, atol=1e-5)


def _args(key=True):
    positions = torch.tensor([3, 0, 9, 1, 7])
    q, k = torch.randn(5, 4 * 64), torch.randn(5, 2, 64)
    return [positions, q, k if key else None, 64, _cache(16, 32), True]


def _args_2d(key=True):
    positions, q, k, head_size, cache, is_neox = _args(key)
    qkv = torch.randn(1, 5, 4 * 64 + 2 * 64 + 16)  # [B, S, W]: query a slice of it, strided tokens
    q, k = qkv[..., : 4 * 64], k.view(1, 5, 2, 64) if key else None
    return [positions.view(1, 5), q, k, head_size, cache, False]


def _args_offset_inverse():
    positions, q, k, _, cache, _ = _args()
    return [positions, q, k, 64, cache, False, 24, True]  # dims [24, 56) of each head rotated back


test_opcheck, test_compile = op_contract_tests({"rotary_embedding": _args,
                                                "rotary_embedding:no_key": lambda: _args(key=False),
                                                "rotary_embedding:2d": _args_2d,
                                                "rotary_embedding:2d_no_key": lambda: _args_2d(key=False),
                                                "rotary_embedding:offset_inverse": _args_offset_inverse})


def test_wrapper_compiles():
    def fn(positions, q, k, cache):
        q, k = q.clone(), k.clone()
        ak.rotary_embedding(positions, q, k, 64, cache, False)
        return q * 2 + k.sum(1).repeat(1, 4)

    positions, q, k, _, cache, _ = _args()
    compiles(fn, positions, q, k, cache)


def test_bad_inputs(values_checked):
    positions, q, k, _, cache, _ = _args()
    op = OPS.rotary_embedding
    raises_naming(TypeError, "query", op, positions, q.to(torch.int32), k, 64, cache, True)
    raises_naming(TypeError, "positions", op, positions.float(), q, k, 64, cache, True)
    raises_naming(ValueError, "key", op, positions, q, k[:4], 64, cache, True)
    raises_naming(ValueError, "query", op, positions, q[:4], k, 64, cache, True)
    raises_naming(ValueError, "query", op, positions, torch.randn(256, 5).t(), k, 64, cache, True)
    raises_naming(ValueError, "query", op, positions, q[:, :250], k, 64, cache, True)
    raises_naming(ValueError, "key", op, positions, q, torch.randn(5, 2, 80), 64, cache, True)
    raises_naming(TypeError, "key", op, positions, q, k.half(), 64, cache, True)
    raises_naming(ValueError, "cos_sin_cache", op, positions, q, k, 64, _cache(16, 128), True)
    raises_naming(ValueError, "cos_sin_cache", op, positions, q, k, 64, torch.randn(16, 33), True)
    raises_naming(TypeError, "cos_sin_cache", op, positions, q, k, 64, cache.to(torch.int64), True)
    raises_naming(ValueError, "head_size", op, positions, q, k, 0, cache, True)
    raises_naming(ValueError, "rope_dim_offset", op, positions, q, k, 64, cache, True, -1)
    raises_naming(ValueError, "rope_dim_offset", op, positions, q, k, 64, cache, True, 33)  # 33 + 32 > 64
    raises_naming(ValueError, "rope_dim_offset", ak.rotary_embedding, positions, q, k, 64, cache, True, 64, True)
    raises_naming(ValueError, "positions", op, positions.view(5, 1, 1), q, k, 64, cache, True)
    raises_naming(ValueError, "positions", op, positions.to("meta"), q, k, 64, cache, True)
    raises_naming(ValueError, "key", op, positions, q, k.to("meta"), 64, cache, True)


def test_bad_2d_shapes():
    # positions [B, S]: query/key must lead with [B, S]; the flat [B*S, ...] form is refused.
    positions, q, k, _, cache, _ = _args()
    pos2d, q2d, k2d = positions.view(1, 5), q.view(1, 5, 4 * 64), k.view(1, 5, 2, 64)
    op = OPS.rotary_embedding
    raises_naming(ValueError, "query", op, pos2d, q, k2d, 64, cache, True)
    raises_naming(ValueError, "key", op, pos2d, q2d, k, 64, cache, True)
    raises_naming(ValueError, "query", op, pos2d, q2d[:, :4], k2d, 64, cache, True)  # seq 4 vs 5
    raises_naming(ValueError, "key", op, pos2d, q2d, k2d[:, :4], 64, cache, True)
    raises_naming(ValueError, "query", op, positions.view(5, 1), q2d.view(5, 1, 4, 64).transpose(0, 1), k2d, 64,
                  cache, True)  # [1, 5] vs positions [5, 1]
    raises_naming(ValueError, "query", op, pos2d, q2d.view(1, 5, 4, 64)[..., :60], k2d, 64, cache, True)
    raises_naming(ValueError, "key", op, pos2d, q2d, k2d.view(1, 5, 128)[..., :100], 64, cache, True)
    raises_naming(ValueError, "query", op, positions, q2d, k, 64, cache, True)  # 1-D positions, [B, S, H*D]


def test_bad_input_writes_nothing(triton_path):
    positions, q, k, _, cache, _ = _args()
    q0 = q.clone()
    with pytest.raises(TypeError):
        OPS.rotary_embedding(positions, q, k.half(), 64, cache, True)
    assert torch.equal(q, q0)


@pytest.mark.parametrize("path", ["reference", "triton"])
def test_check_indices_switch(path, monkeypatch):
    positions, q, k, _, cache, _ = _args()
    rows = cache.shape[0]
    monkeypatch.setenv("ASCENDTILE_KERNELS", path)
    monkeypatch.setenv("ASCENDTILE_CHECK_INDICES", "1")
    q0 = q.clone()
    for bad in (rows, -1):
        wrong = positions.clone()
        wrong[3] = bad
        with pytest.raises(ValueError, match=rf"^positions: entry 3 is {bad}, outside \[0, {rows}\)"):
            OPS.rotary_embedding(wrong, q, k, 64, cache, True)
    assert torch.equal(q, q0)  # nothing rotated
    OPS.rotary_embedding(positions, q, k, 64, cache, True)
    monkeypatch.setenv("ASCENDTILE_CHECK_INDICES", "0")  # off: the token is left unrotated, no error
    OPS.rotary_embedding(wrong, q, k, 64, cache, True)


@pytest.mark.parametrize("is_neox", [True, False])
@pytest.mark.parametrize("inverse,offset", [(False, 0), (True, 16)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_traceable_matches_reference(is_neox, inverse, offset, dtype):
    """The decode graph's form (compilation/decompose.py) equals the reference bit for bit: q and
    k as strided slices of one fused qkv tensor, q rotated through its [T, H*D] view, positions
    outside the cache (-1, rows) left unrotated, a NaN row staying in its own token."""
    from ascendtile.ops.reference.rope import rotary_embedding, rotary_embedding_traceable

    tokens, heads, kv_heads, head_size, rot_dim, rows = 7, 3, 1, 64, 32, 40
    cache = torch.randn(rows, rot_dim, dtype=dtype)
    positions = torch.tensor([0, 39, -1, 5, 40, 12, 3])
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * head_size, dtype=dtype)
    qkv[5, 7] = float("nan")
    results = []
    for rotate in (rotary_embedding, rotary_embedding_traceable):
        x = qkv.clone()
        query, key = x[:, :heads * head_size], x[:, heads * head_size:].unflatten(-1, (-1, head_size))[:, :kv_heads]
        rotate(positions, query, key, head_size, cache, is_neox, offset, inverse)
        results.append(x)
    torch.testing.assert_close(results[1], results[0], rtol=0, atol=0, equal_nan=True)
    assert not torch.equal(results[0][:2], qkv[:2]) and torch.equal(results[0][2], qkv[2])
