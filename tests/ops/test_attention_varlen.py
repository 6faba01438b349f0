"""flash_attention_varlen, the op contract: the reference vs an independent per-sequence fp64
formula, opcheck and torch.compile on both kernel paths, the functional wrapper and bad inputs.
(Triton kernel vs reference numerics: tests/kernels/test_attention_varlen.py.)"""
import pytest
import torch

import ascendtile.ops as ak
from opchecks import compiles, op_contract_tests, raises_naming
from ops._attention import independent_attention

OPS = torch.ops.ascend


@pytest.mark.parametrize("causal", [True, False])
def test_reference_matches_independent(causal):
    q_lens, kv_lens = [5, 1, 9, 3], [5, 4, 9, 0]
    q = torch.randn(sum(q_lens), 4, 32)
    k, v = torch.randn(sum(kv_lens), 2, 32), torch.randn(sum(kv_lens), 2, 32)
    cu_q = torch.tensor([0, 5, 6, 15, 18], dtype=torch.int32)
    cu_k = torch.tensor([0, 5, 9, 18, 18], dtype=torch.int32)
    got = ak.flash_attention_varlen(q, k, v, cu_q, cu_k, 9, 9, 0.3, causal)
    keys = list(k.split(kv_lens))
    expect = independent_attention(q, keys, list(v.split(kv_lens)), q_lens, kv_lens, 0.3, causal=causal)
    torch.testing.assert_close(got.double(), expect, rtol=1e-5, atol=1e-5)


def _args():
    q, k, v = torch.randn(6, 4, 16), torch.randn(9, 2, 16), torch.randn(9, 2, 16)
    cu_q, cu_k = torch.tensor([0, 4, 6], dtype=torch.int32), torch.tensor([0, 5, 9], dtype=torch.int32)
    return [torch.empty_like(q), q, k, v, cu_q, cu_k, 4, 5, 0.25, True]


test_opcheck, test_compile = op_contract_tests({"flash_attention_varlen": _args})


def test_wrapper_compiles():
    def prefill(q, k, v, cu_q, cu_k):
        return ak.flash_attention_varlen(q, k, v, cu_q, cu_k, 4, 5, 0.25) * 3

    compiles(prefill, *_args()[1:6])


def test_bad_inputs(values_checked):
    out, q, k, v, cu_q, cu_k, mq, mk, scale, causal = _args()
    op = OPS.flash_attention_varlen
    raises_naming(ValueError, "k", op, out, q, torch.randn(9, 3, 16), torch.randn(9, 3, 16), cu_q, cu_k, mq, mk, scale, causal)
    raises_naming(ValueError, "v", op, out, q, k, v[:5], cu_q, cu_k, mq, mk, scale, causal)
    raises_naming(TypeError, "k", op, out, q, k.to(torch.int64), v, cu_q, cu_k, mq, mk, scale, causal)
    raises_naming(ValueError, "cu_seqlens_k", op, out, q, k, v, cu_q, cu_k[:2], mq, mk, scale, causal)
    raises_naming(ValueError, "max_seqlen_k", op, out, q, k, v, cu_q, cu_k, mq, 10, scale, causal)
    raises_naming(ValueError, "v", op, out, q, k, v.to("meta"), cu_q, cu_k, mq, mk, scale, causal)
