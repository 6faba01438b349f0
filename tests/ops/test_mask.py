"""causal_mask, the op contract: reference vs an independent per-element formula and HF's mask
functions, opcheck and torch.compile on both kernel paths, the functional wrapper and bad inputs.
(Triton kernel vs reference numerics: tests/kernels/test_mask.py.)"""
import pytest
import torch

import ascendtile.ops as ak
from opchecks import compiles, op_contract_tests, raises_naming

OPS = torch.ops.ascend


def _loop_mask(q_lens, kv_lens, max_q, max_kv, fill, window):
    out = torch.full((len(q_lens), max_q, max_kv), fill)
    for b, (q, kv) in enumerate(zip(q_lens.tolist(), kv_lens.tolist())):
        for i in range(q):
            pos = kv - q + i  # this query's absolute position in its sequence
            for j in range(kv):
                if j <= pos and (window <= 0 or pos - j < window):
                    out[b, i, j] = 0.0
    return out


CASES = {
    "prefill": ([5, 3], [5, 3]),  # q_len == kv_len
    "chunked": ([4, 2, 3], [9, 2, 17]),  # q_len < kv_len: cached context before the chunk
    "decode": ([1, 1, 1], [1, 7, 12]),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("window", [0, 1, 3, -1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_reference_matches_loop(case, window, dtype):
    q_lens, kv_lens = (torch.tensor(v) for v in CASES[case])
    max_q, max_kv = int(q_lens.max()) + 2, int(kv_lens.max()) + 3  # extra padding rows/columns
    got = ak.causal_mask(q_lens, kv_lens, max_q, max_kv, dtype, -1e4, window)
    assert got.dtype == dtype
    assert torch.equal(got, _loop_mask(q_lens, kv_lens, max_q, max_kv, -1e4, window).to(dtype))


def test_bottom_right_alignment_matches_triu():
    # reference-facts: masked = triu(ones, diagonal = kv_len - q_len + 1).
    got = ak.causal_mask(torch.tensor([3]), torch.tensor([7]))[0]
    assert torch.equal(got == float("-inf"), torch.ones(3, 7, dtype=torch.bool).triu(7 - 3 + 1))


def _args():
    return [torch.empty(3, 4, 9), torch.tensor([4, 1, 2]), torch.tensor([9, 5, 2], dtype=torch.int32), float("-inf"), 4]


test_opcheck, test_compile = op_contract_tests({"causal_mask": _args})


def test_wrapper_compiles():
    def fn(scores, q_lens, kv_lens):
        mask = ak.causal_mask(q_lens, kv_lens, scores.shape[1], scores.shape[2], scores.dtype, -1e9, 2)
        return torch.softmax(scores + mask, -1)

    compiles(fn, torch.randn(2, 3, 6), torch.tensor([3, 2]), torch.tensor([6, 4]))


def test_bad_inputs(values_checked):
    out, q_lens, kv_lens, fill, window = _args()
    op = OPS.causal_mask
    raises_naming(TypeError, "out", op, out.int(), q_lens, kv_lens, fill, window)
    raises_naming(TypeError, "out", op, out.double(), q_lens, kv_lens, fill, window)
    raises_naming(ValueError, "out", op, out[0], q_lens, kv_lens, fill, window)
    raises_naming(ValueError, "out", op, torch.empty(3, 9, 4).transpose(1, 2), q_lens, kv_lens, fill, window)
    raises_naming(TypeError, "q_lens", op, out, q_lens.float(), kv_lens, fill, window)
    raises_naming(ValueError, "kv_lens", op, out, q_lens, kv_lens[:2], fill, window)
    raises_naming(ValueError, "q_lens", op, out, q_lens.view(3, 1), kv_lens, fill, window)
    raises_naming(ValueError, "kv_lens", op, out, q_lens, kv_lens.to("meta"), fill, window)


def test_bad_input_writes_nothing(triton_path):
    out, q_lens, kv_lens, fill, window = _args()
    out.fill_(7.0)
    with pytest.raises(ValueError):
        OPS.causal_mask(out, q_lens, kv_lens[:2], fill, window)
    assert (out == 7.0).all()


@pytest.mark.parametrize("window", [0, 1, 4])
def test_window_convention_matches_hf_masking_utils(window):
    # HF's mask functions take absolute positions: query i of a chunk sits at kv_len - q_len + i.
    from transformers.masking_utils import causal_mask_function, sliding_window_causal_mask_function

    visible_fn = sliding_window_causal_mask_function(window) if window else causal_mask_function
    q_len, kv_len = 3, 9
    got = ak.causal_mask(torch.tensor([q_len]), torch.tensor([kv_len]), sliding_window=window)[0] == 0
    q_idx, kv_idx = torch.arange(kv_len - q_len, kv_len)[:, None], torch.arange(kv_len)[None, :]
    expect = visible_fn(torch.tensor(0), torch.tensor(0), q_idx, kv_idx).expand(q_len, kv_len)
    assert torch.equal(got, expect)
