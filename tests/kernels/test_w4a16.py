"""w4a16_linear: Triton kernel (interpreter) vs the torch reference, over several groups per K
step and K steps per group, K and N tails, every row-tile size and nonfinite rows. The kernel
rounds each weight to the activation dtype for the dot: tolerances.W4A16_TOLERANCES."""
import pytest
import torch

from ascendtile.kernels.w4a16 import BLOCK_KS, BLOCK_MS, BLOCK_NS, block_k_for, groups_per_block, max_block_k, tiles_for
from ascendtile.platform import INTERPRETER_GRID
from opchecks import kernel_path, run_both
from ops._w4a16 import random_w4a16
from tolerances import W4A16_TOLERANCES, assert_close

OPS = torch.ops.ascend


def _args(m, k, n, group_size, dtype, bias=True, symmetric=False):
    qweight, scales, mins = random_w4a16(n, k, group_size, symmetric)
    return [torch.randn(m, k).to(dtype), qweight, scales, mins, group_size, torch.randn(n).to(dtype) if bias else None]


# Tiles as the launcher picks them for the interpreter's grid, in the comments.
@pytest.mark.parametrize("m,k,n,group_size,dtype", [
    (1, 256, 70, 32, torch.float16),  # 16x32x128: 4 groups per K step, an N tail
    (3, 320, 64, 320, torch.bfloat16),  # 16x32x128 per channel: a 64-wide K tail inside the one group
    (17, 384, 96, 96, torch.float32),  # 32x32x32: 3 K steps per group
    (33, 192, 130, 64, torch.float16),  # 64x64x128: 2 groups per step, a K tail of one group, N tail
    (40, 256, 40, 128, torch.bfloat16),  # 64x32x128: one group per step
    (1, 256, 512, 64, torch.float16),  # 16x128x64
    (100, 256, 300, 32, torch.bfloat16),  # 128x128x32: one step per group, M and N tails
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


@pytest.mark.parametrize("m,n,dtype,expect", [
    (1, 576, torch.bfloat16, (16, 32, 128)),  # 18 tiles in one wave rather than 9 of 64 columns
    (1, 960, torch.bfloat16, (16, 64, 128)),  # 15 tiles in one wave rather than 30 in two
    (1, 3072, torch.bfloat16, (16, 128, 64)),  # 24 tiles in two waves rather than 48 in three
    (33, 960, torch.float16, (64, 64, 128)),
    (2048, 960, torch.bfloat16, (128, 64, 64)),
    (2048, 3072, torch.bfloat16, (128, 128, 32)),
    (2048, 3072, torch.float32, (128, 64, 32)),  # an fp32 128x128 tile would need 16-wide K steps
    (1, 960, torch.float32, (16, 64, 64)),
])
def test_tiles_for(m, n, dtype, expect):
    assert tiles_for(m, n, 576, 32, dtype, 20) == expect


@pytest.mark.parametrize("block_m", BLOCK_MS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_every_row_tile_gets_its_longest_k_step(block_m, dtype):
    m = block_m - 1 if block_m > 16 else 1
    assert tiles_for(m, 10 ** 5, 1536, 32, dtype, INTERPRETER_GRID)[0] == block_m
    for n in (32, 64, 128, 10 ** 5):
        _, block_n, block_k = tiles_for(m, n, 1536, 32, dtype, INTERPRETER_GRID)
        assert block_k == max_block_k(block_m, block_n, dtype) and block_k in BLOCK_KS


@pytest.mark.parametrize("block_m,block_n", [(bm, bn) for bm in BLOCK_MS for bn in BLOCK_NS])
@pytest.mark.parametrize("k,group_size", [(576, 32), (576, 64), (1536, 128), (1536, 96), (1536, 192), (576, 576),
                                          (640, 640), (2048, 256)])
def test_kernel_group_of_every_input(block_m, block_n, k, group_size):
    """The kernel gives input k0 + j of a K step the group k0 // group_size + j // (BLOCK_K /
    GROUPS_PER_BLOCK): that must be (k0 + j) // group_size for every input."""
    block_k = block_k_for(block_m, block_n, k, group_size, torch.bfloat16)
    assert block_k in BLOCK_KS and block_k <= max_block_k(block_m, block_n, torch.bfloat16)
    per_group = block_k // groups_per_block(block_k, group_size)
    for k0 in range(0, k, block_k):
        for j in range(min(block_k, k - k0)):
            assert k0 // group_size + j // per_group == (k0 + j) // group_size, (k0, j)
