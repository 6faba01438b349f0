"""w4a16_linear: Triton kernel (interpreter) vs the torch reference, over several groups per K
step and K steps per group, K and N tails, every row-tile size and nonfinite rows. The kernel
rounds each weight to the activation dtype for the dot: tolerances.W4A16_TOLERANCES."""
import pytest
import torch

from ascendtile.kernels.w4a16 import BLOCK_KS, MAX_BLOCK_K, block_k_for, block_m_for, groups_per_block, max_block_k
from opchecks import kernel_path, run_both
from ops._w4a16 import random_w4a16
from tolerances import W4A16_TOLERANCES, assert_close

OPS = torch.ops.ascend


def _args(m, k, n, group_size, dtype, bias=True, symmetric=False):
    qweight, scales, mins = random_w4a16(n, k, group_size, symmetric)
    return [torch.randn(m, k).to(dtype), qweight, scales, mins, group_size, torch.randn(n).to(dtype) if bias else None]


@pytest.mark.parametrize("m,k,n,group_size,dtype", [
    (1, 256, 70, 32, torch.float16),  # 4 groups per 128-wide K step, an N tail
    (3, 320, 64, 320, torch.bfloat16),  # per channel: a 64-wide K tail inside the one group
    (17, 384, 96, 96, torch.float32),  # 32-row tiles; 3 K steps of 32 per group
    (33, 192, 130, 64, torch.float16),  # 128-row tiles, 64-wide steps (one group each), 3 N tiles
    (40, 256, 40, 128, torch.bfloat16),  # 2 K steps per group
])
def test_kernel_matches_reference(m, k, n, group_size, dtype):
    run_both(OPS.w4a16_linear, _args(m, k, n, group_size, dtype, bias=m % 2 == 1, symmetric=m == 3), mutated=[],
             **W4A16_TOLERANCES[dtype])


def test_strided_3d_input():
    qweight, scales, mins = random_w4a16(24, 128, 32)
    x = torch.randn(2, 3, 160, dtype=torch.float16)[..., :128]  # rows with a pitch of 160
    run_both(OPS.w4a16_linear, [x, qweight, scales, mins, 32, None], mutated=[], **W4A16_TOLERANCES[torch.float16])


def test_nonfinite_rows_stay_in_their_rows(triton_path):
    qweight, scales, mins = random_w4a16(64, 128, 32)
    x = torch.randn(20, 128)
    x[3, 5] = float("nan")
    x[11, 100] = float("-inf")
    got = OPS.w4a16_linear(x, qweight, scales, mins, 32, None)
    assert got[3].isnan().all() and not got[11].isfinite().any()
    clean = [r for r in range(20) if r not in (3, 11)]
    with kernel_path("reference"):
        expect = OPS.w4a16_linear(x[clean], qweight, scales, mins, 32, None)
    assert_close(got[clean], expect)


@pytest.mark.parametrize("m,expect", [(1, 16), (16, 16), (17, 32), (32, 32), (33, 128), (4096, 128)])
def test_rows_per_tile(m, expect):
    assert block_m_for(m) == expect


@pytest.mark.parametrize("block_m", list(MAX_BLOCK_K))
@pytest.mark.parametrize("k,group_size", [(576, 32), (576, 64), (1536, 128), (1536, 96), (1536, 192), (576, 576),
                                          (640, 640), (2048, 256)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_kernel_group_of_every_input(block_m, k, group_size, dtype):
    """The kernel gives input k0 + j of a K step the group k0 // group_size + j // (BLOCK_K /
    GROUPS_PER_BLOCK): that must be (k0 + j) // group_size for every input."""
    block_k = block_k_for(block_m, k, group_size, dtype)
    assert block_k in BLOCK_KS and block_k <= max_block_k(block_m, dtype)
    per_group = block_k // groups_per_block(block_k, group_size)
    for k0 in range(0, k, block_k):
        for j in range(min(block_k, k - k0)):
            assert k0 // group_size + j // per_group == (k0 + j) // group_size, (k0, j)
