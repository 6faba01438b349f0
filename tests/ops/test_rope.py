"""rotary_embedding, the op contract: reference vs an independent complex-number formula and HF's
rotate_half, opcheck and torch.compile on both kernel paths, the functional wrapper and bad inputs.
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


def _complex_rope(x, positions, cache, head_size, is_neox):
    """Rotation as complex multiplication in fp64: z · e^{iθ} on (x1, x2) pairs."""
    heads = x.double().reshape(x.shape[0], -1, head_size).clone()
    half = cache.shape[1] // 2
    rot = heads[..., : 2 * half]
    if is_neox:
        z = torch.complex(rot[..., :half], rot[..., half:])
    else:
        z = torch.complex(rot[..., 0::2], rot[..., 1::2])
    c = cache.double()[positions.long()]
    z = z * torch.complex(c[:, None, :half], c[:, None, half:])
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


def _args(key=True):
    positions = torch.tensor([3, 0, 9, 1, 7])
    q, k = torch.randn(5, 4 * 64), torch.randn(5, 2, 64)
    return [positions, q, k if key else None, 64, _cache(16, 32), True]


test_opcheck, test_compile = op_contract_tests({"rotary_embedding": _args,
                                                "rotary_embedding:no_key": lambda: _args(key=False)})


def test_wrapper_compiles():
    def fn(positions, q, k, cache):
        q, k = q.clone(), k.clone()
        ak.rotary_embedding(positions, q, k, 64, cache, False)
        return q * 2 + k.sum(1).repeat(1, 4)

    positions, q, k, _, cache, _ = _args()
    compiles(fn, positions, q, k, cache)


def test_bad_inputs():
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
    raises_naming(ValueError, "positions", op, positions.view(5, 1), q, k, 64, cache, True)
    raises_naming(ValueError, "positions", op, positions.to("meta"), q, k, 64, cache, True)
    raises_naming(ValueError, "key", op, positions, q, k.to("meta"), 64, cache, True)


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
