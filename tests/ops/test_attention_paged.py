"""paged_attention, the op contract: the reference vs an independent per-sequence fp64 formula,
opcheck and torch.compile on both kernel paths, the functional wrapper and bad inputs.
(Triton kernel vs reference numerics: tests/kernels/test_attention_paged.py.)"""
import pytest
import torch

import ascendkit.ops as ak
from opchecks import compiles, op_contract_tests, raises_naming
from ops._attention import make_paged_batch, paged_formula

OPS = torch.ops.ascend


@pytest.mark.parametrize("softcap,window", [(0.0, 0), (20.0, 5)])
def test_reference_matches_independent(softcap, window):
    kv_lens = [1, 17, 64, 0, 33]
    query, kc, vc, table, _, seqused = make_paged_batch([1] * 5, kv_lens, 8, 2, 64, 16)
    got = ak.paged_attention(query, kc, vc, table, seqused, 0.125, softcap, window)
    expect = paged_formula(query, kc, vc, table, [1] * 5, kv_lens, 0.125, softcap, window)
    torch.testing.assert_close(got.double(), expect, rtol=1e-5, atol=1e-5)
    assert (got[3] == 0).all()


def _args():
    query, kc, vc, table, _, seqused = make_paged_batch([1, 1], [19, 5], 4, 2, 16, 16)
    return [torch.empty_like(query), query, kc, vc, table, seqused, 0.25, 10.0, 6]


test_opcheck, test_compile = op_contract_tests({"paged_attention": _args})


def test_wrapper_compiles():
    def step(query, kc, vc, table, seq_lens):
        return ak.paged_attention(query, kc, vc, table, seq_lens, 0.25) + 1

    compiles(step, *_args()[1:6])


def test_bad_inputs():
    out, query, kc, vc, table, seqused, scale, cap, win = _args()
    op = OPS.paged_attention
    raises_naming(TypeError, "query", op, out, query.int(), kc, vc, table, seqused, scale, cap, win)
    raises_naming(ValueError, "key_cache", op, torch.empty(2, 5, 16), torch.randn(2, 5, 16), kc, vc, table, seqused, scale, cap, win)
    raises_naming(ValueError, "block_tables", op, out, query, kc, vc, table[:1], seqused, scale, cap, win)
    # A table too short for a sequence's length: seq_len > capacity (checked where it needs no sync).
    raises_naming(ValueError, "seq_lens", op, out, query, kc, vc, table[:, :1], seqused, scale, cap, win)
    raises_naming(ValueError, "seq_lens", op, out, query, kc, vc, table, torch.tensor([19], dtype=torch.int32), scale, cap, win)
    raises_naming(TypeError, "seq_lens", op, out, query, kc, vc, table, seqused.long(), scale, cap, win)
    raises_naming(ValueError, "block_tables", op, out, query, kc, vc, table.to("meta"), seqused, scale, cap, win)
    raises_naming(ValueError, "query", op, out, torch.randn(2, 16, 4).transpose(1, 2), kc, vc, table, seqused, scale, cap, win)


@pytest.mark.parametrize("path", ["reference", "triton"])
def test_check_indices_switch(path, monkeypatch):
    out, query, kc, vc, table, seqused, scale, cap, win = _args()  # lengths 19 and 5: 2 and 1 blocks of 16
    num_blocks = kc.shape[0]
    monkeypatch.setenv("ASCENDKIT_KERNELS", path)
    monkeypatch.setenv("ASCENDKIT_CHECK_INDICES", "1")
    out.fill_(7.0)
    for (b, j), bad in [((0, 1), num_blocks), ((1, 0), -1)]:
        wrong = table.clone()
        wrong[b, j] = bad
        with pytest.raises(ValueError, match=rf"^block_tables: entry \[{b}, {j}\] is {bad}, outside \[0, {num_blocks}\)"):
            OPS.paged_attention(out, query, kc, vc, wrong, seqused, scale, cap, win)
    assert (out == 7.0).all()
    padded = table.clone()
    padded[1, 1:] = num_blocks + 5  # past sequence 1's length: never read, so accepted
    OPS.paged_attention(out, query, kc, vc, padded, seqused, scale, cap, win)
    monkeypatch.setenv("ASCENDKIT_CHECK_INDICES", "0")  # off: the bad block's keys are hidden, no error
    OPS.paged_attention(out, query, kc, vc, wrong, seqused, scale, cap, win)
