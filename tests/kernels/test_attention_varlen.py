"""flash_attention_varlen: the Triton kernel (interpreter, the unified kernel without a block
table) vs the torch reference and the independent fp64 formula; causal bottom-right and not,
q/k/v as strided column slices of one fused qkv tensor, kv_len > q_len and kv_len < q_len."""
import pytest
import torch

from opchecks import kernel_path
from ops._attention import independent_attention
from tolerances import assert_close

OPS = torch.ops.ascend
VS_FORMULA = {torch.float32: 1e-5, torch.float16: 5e-3, torch.bfloat16: 3e-2}


def check(q_lens, kv_lens, heads, kv_heads, head_size, causal, dtype=torch.float32):
    tq, tk = sum(q_lens), sum(kv_lens)
    # q from one fused projection, k/v from another: rows strided, last dim contiguous.
    q = torch.randn(tq, heads + 3, head_size).to(dtype)[:, 1:heads + 1]
    kv = torch.randn(tk, 2 * kv_heads, head_size).to(dtype)
    k, v = kv[:, :kv_heads], kv[:, kv_heads:]
    cu_q = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)
    cu_k = torch.tensor([0, *torch.tensor(kv_lens).cumsum(0).tolist()], dtype=torch.int32)
    scale = head_size ** -0.5
    args = [q, k, v, cu_q, cu_k, max(q_lens), max(kv_lens), scale, causal]
    out = torch.full((tq, heads, head_size), float("nan"), dtype=dtype)
    with kernel_path("triton"):
        OPS.flash_attention_varlen(out, *args)
    expect = torch.empty_like(out)
    OPS.flash_attention_varlen(expect, *args)
    assert not out.isnan().any()
    assert_close(out, expect)
    formula = independent_attention(q, list(k.split(kv_lens)), list(v.split(kv_lens)), q_lens, kv_lens, scale,
                                    causal=causal)
    torch.testing.assert_close(out.double(), formula, rtol=VS_FORMULA[dtype], atol=VS_FORMULA[dtype])
    return out


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_matches_reference(causal, dtype):
    check([7, 1, 40, 17], [7, 5, 40, 17], 8, 2, 32, causal, dtype)


@pytest.mark.parametrize("heads,kv_heads,head_size", [(8, 8, 64), (5, 1, 80), (4, 2, 128), (2, 1, 256)])
def test_heads_and_head_sizes(heads, kv_heads, head_size):
    check([9, 70], [9, 70], heads, kv_heads, head_size, True, torch.float16)


def test_fewer_keys_than_queries():
    # Causal bottom-right: with kv_len < q_len the first q_len - kv_len queries see nothing -> 0.
    out = check([6, 3], [2, 0], 4, 2, 16, True)
    assert (out[:4] == 0).all() and (out[6:] == 0).all()


def test_long_sequence():
    check([129, 1], [1025, 255], 4, 1, 16, True)
