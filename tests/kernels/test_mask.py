"""causal_mask: Triton kernel (interpreter) vs the torch reference. The mask holds only 0 and
fill_value (rounded once to the dtype on both paths), so the comparison is exact."""
import copy

import pytest
import torch

from opchecks import kernel_path

OP = torch.ops.ascend.causal_mask

CASES = {
    "prefill": ([7, 3, 1], [7, 3, 1]),  # q_len == kv_len
    "chunked": ([4, 2, 5], [9, 2, 37]),  # q_len < kv_len: cached context before the chunk
    "decode": ([1, 1, 1, 1], [1, 7, 12, 33]),
    "mixed": ([5, 1, 0], [19, 20, 4]),  # prefill chunk, decode, and an empty (padding) sequence
}


def _run_both_exact(args):
    ref_args, tri_args = copy.deepcopy(list(args)), copy.deepcopy(list(args))
    with kernel_path("reference"):
        OP(*ref_args)
    with kernel_path("triton"):
        OP(*tri_args)
    assert torch.equal(tri_args[0], ref_args[0])
    return tri_args[0]


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("window", [0, 1, 4, -3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("len_dtype", [torch.int32, torch.int64])
def test_mask(case, window, dtype, len_dtype):
    q_lens, kv_lens = (torch.tensor(v, dtype=len_dtype) for v in CASES[case])
    max_q, max_kv = int(q_lens.max()) + 2, int(kv_lens.max()) + 3  # padding rows and columns
    out = torch.full((len(q_lens), max_q, max_kv), 123.0, dtype=dtype)
    _run_both_exact([out, q_lens, kv_lens, float("-inf"), window])


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")  # numpy, in the interpreter
@pytest.mark.parametrize("fill", [-1e4, -3.0e38, 0.5])
def test_mask_fill_values(fill):
    # -3e38 overflows fp16 to -inf on both paths.
    out = torch.empty(2, 3, 11, dtype=torch.float16)
    got = _run_both_exact([out, torch.tensor([3, 2]), torch.tensor([11, 5]), fill, 0])
    assert (got[0, 0, 9:] == torch.tensor(fill, dtype=torch.float16)).all()


def test_mask_long_rows_and_strided_out():
    # max_kv past one 2048-wide column chunk; out rows padded to a larger pitch.
    q_lens, kv_lens = torch.tensor([3, 1]), torch.tensor([2500, 2049])
    buf = torch.full((2, 4, 2600), 9.0)
    out = buf[:, :3, :2500]
    assert out.stride(1) == 2600
    ref, tri = buf.clone(), buf.clone()
    with kernel_path("reference"):
        OP(ref[:, :3, :2500], q_lens, kv_lens, float("-inf"), 1000)
    with kernel_path("triton"):
        OP(tri[:, :3, :2500], q_lens, kv_lens, float("-inf"), 1000)
    assert torch.equal(tri, ref)
    assert (tri[:, 3:] == 9.0).all() and (tri[..., 2500:] == 9.0).all()  # nothing outside out


def test_mask_empty():
    _run_both_exact([torch.empty(0, 4, 4), torch.empty(0, dtype=torch.int64), torch.empty(0, dtype=torch.int64), -1.0, 0])
    _run_both_exact([torch.empty(2, 0, 4), torch.tensor([0, 0]), torch.tensor([1, 4]), -1.0, 0])
