"""rotary_embedding: Triton kernel (interpreter) vs the torch reference."""
import pytest
import torch

from ascendtile.model.layers.rope_scaling import build_cos_sin_cache
from guarded import guarded, guards_intact, inner
from opchecks import kernel_path, run_both

OP = torch.ops.ascend.rotary_embedding
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# (head_size, rot_dim): full rotary at 64/80/128/256, partial (rot_dim < head_size) incl. the
# 192-dim heads rotating 64 (the DeepSeek-V2 qk head, rope part first here) and 80 rotating 32.
HEADS = [(64, 64), (80, 80), (128, 128), (256, 256), (192, 64), (80, 32)]
MAX_POS = 8192


def _cache(rot_dim: int, dtype=torch.float32) -> torch.Tensor:
    return build_cos_sin_cache(rot_dim, MAX_POS, 10000.0, dtype=dtype)


def _positions(tokens: int, dtype=torch.int64) -> torch.Tensor:
    pos = torch.randint(0, MAX_POS, (tokens,))
    pos[:1], pos[-1:] = 0, MAX_POS - 1  # both ends of the cache
    return pos.to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("is_neox", [True, False])
@pytest.mark.parametrize("head_size,rot_dim", HEADS)
def test_rope_gqa(dtype, is_neox, head_size, rot_dim):
    tokens = 7
    q = torch.randn(tokens, 5 * head_size, dtype=dtype)  # [T, H*D]
    k = torch.randn(tokens, 2, head_size, dtype=dtype)  # [T, Hkv, D]
    run_both(OP, [_positions(tokens), q, k, head_size, _cache(rot_dim), is_neox], mutated=[1, 2])


@pytest.mark.parametrize("is_neox", [True, False])
@pytest.mark.parametrize("inverse", [False, True])
@pytest.mark.parametrize("head_size,rot_dim,offset", [(96, 32, 40), (192, 64, 128), (80, 80, 0)])
def test_rope_offset_inverse(is_neox, inverse, head_size, rot_dim, offset):
    # The span [offset, offset + rot_dim): pass-through dims on both sides (96/32/40), the last
    # rot_dim (DeepSeek-V4's 192/64/128), or the whole head inverted; bf16 heads, key [T, H*D].
    q = torch.randn(7, 5, head_size, dtype=torch.bfloat16)
    k = torch.randn(7, 2 * head_size, dtype=torch.bfloat16)
    run_both(OP, [_positions(7), q, k, head_size, _cache(rot_dim), is_neox, offset, inverse], mutated=[1, 2])


@pytest.mark.parametrize("is_neox", [True, False])
def test_rope_offset_inverse_2d_positions_key_none(is_neox):
    q = torch.randn(2, 3, 4 * 96, dtype=torch.float16)  # [B, S, H*D]
    run_both(OP, [_positions(6).view(2, 3), q, None, 96, _cache(32), is_neox, 40, True], mutated=[1])

@pytest.mark.parametrize("is_neox", [True, False])
def test_rope_key_none_int32_positions(is_neox):
    q = torch.randn(83, 3, 128, dtype=torch.bfloat16)
    run_both(OP, [_positions(83, torch.int32), q, None, 128, _cache(128), is_neox], mutated=[1])


@pytest.mark.parametrize("is_neox", [True, False])
def test_rope_strided_fused_qkv(is_neox):
    # q and k are views into one fused projection output: strided token rows (and heads in 3-D).
    qkv = torch.randn(13, (9 + 3 + 3) * 64 + 8, dtype=torch.float16)
    q = qkv[:, : 9 * 64]
    k = qkv[:, 9 * 64 : 12 * 64].view(13, 3, 64)

    def op(positions, qkv, cache):  # mutate views of the copy run_both hands over
        OP(positions, qkv[:, : 9 * 64], qkv[:, 9 * 64 : 12 * 64].view(13, 3, 64), 64, cache, is_neox)

    assert q.stride(0) == k.stride(0) == qkv.shape[1]
    run_both(op, [_positions(13), qkv, _cache(64)], mutated=[1])


@pytest.mark.parametrize("is_neox", [True, False])
def test_rope_2d_positions_strided_batches(is_neox):
    # vLLM's [B, S] form on slices of a fused qkv [B, S+1, W]: token stride W, batch stride
    # (S+1)*W (not S*W: no flat view exists), key as [B, S, H, D]; positions a [B, S] slice too.
    batch, seq, width = 3, 4, (4 + 2 + 2) * 64 + 8

    def op(positions, qkv, cache):
        q = qkv[:, :seq, : 4 * 64]
        k = qkv[:, :seq, 4 * 64 : 6 * 64].unflatten(-1, (2, 64))
        OP(positions[:, :seq], q, k, 64, cache, is_neox)

    qkv = torch.randn(batch, seq + 1, width, dtype=torch.float16)
    run_both(op, [_positions(batch * (seq + 2)).view(batch, seq + 2), qkv, _cache(64)], mutated=[1])


def test_rope_2d_positions_key_none_int32():
    q = torch.randn(2, 5, 3, 64, dtype=torch.bfloat16)  # [B, S, H, D]
    run_both(OP, [_positions(10, torch.int32).view(2, 5), q, None, 64, _cache(32), False], mutated=[1])


def test_rope_many_heads_and_low_precision_cache():
    # 128 query heads (DeepSeek-V2) cross the head tile; the cache itself in bf16.
    q = torch.randn(5, 128, 192, dtype=torch.bfloat16)
    k = torch.randn(5, 1, 192, dtype=torch.bfloat16)
    run_both(OP, [_positions(5), q, k, 192, _cache(64, torch.bfloat16), False], mutated=[1, 2])


def test_rope_yarn_cache_and_empty_batch():
    cache = build_cos_sin_cache(64, MAX_POS, 10000.0, {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048})
    q, k = torch.randn(7, 2, 64), torch.randn(7, 1, 64)
    run_both(OP, [_positions(7), q, k, 64, cache, False], mutated=[1, 2])
    run_both(OP, [_positions(0), torch.randn(0, 64), None, 64, cache, True], mutated=[1])


def test_rope_padded_head_stride():
    # [T, H, D] views whose heads sit 96 elements apart (head stride != head_size).
    buf = torch.randn(7, 4, 96, dtype=torch.float16)

    def op(positions, buf, cache):
        OP(positions, buf[:, :3, :64], buf[:, 3:, :64], 64, cache, True)

    run_both(op, [_positions(7), buf, _cache(32)], mutated=[1])


@pytest.mark.parametrize("is_neox", [True, False])
@pytest.mark.parametrize("pos_dtype", [torch.int32, torch.int64])
def test_rope_out_of_range_positions_leave_tokens_unrotated(is_neox, pos_dtype):
    # The cos/sin cache sits between NaN guard rows: a token whose position is past the end (by 0
    # or 1) or negative (-1 included: it is no padding marker here) would read NaN from them.
    rows, tokens = 64, 9
    positions = torch.randint(0, rows, (tokens,))
    bad = torch.tensor([1, 3, 4, 7])
    positions[bad] = torch.tensor([rows, rows + 1, -1, -2])
    good = torch.tensor([t for t in range(tokens) if t not in bad.tolist()])
    q, k = torch.randn(tokens, 4, 64), torch.randn(tokens, 2, 64)
    buf = guarded(_cache(32)[:rows])
    expect_q, expect_k = q[good].clone(), k[good].clone()
    with kernel_path("reference"):  # the in-range subset alone
        OP(positions[good].to(pos_dtype), expect_q, expect_k, 64, inner(buf), is_neox)
    for path in ("reference", "triton"):
        got_q, got_k = q.clone(), k.clone()
        with kernel_path(path):
            OP(positions.to(pos_dtype), got_q, got_k, 64, inner(buf), is_neox)
        assert guards_intact(buf) and not got_q.isnan().any() and not got_k.isnan().any(), path
        assert torch.equal(got_q[bad], q[bad]) and torch.equal(got_k[bad], k[bad]), path
        torch.testing.assert_close(got_q[good], expect_q, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(got_k[good], expect_k, rtol=1e-6, atol=1e-6)
