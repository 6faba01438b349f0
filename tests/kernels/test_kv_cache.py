"""reshape_and_cache_flash / concat_and_cache_mla: Triton kernel (interpreter) vs the torch
reference on NaN-poisoned caches. Copies are exact, so the comparison is bit-exact, and every
slot not targeted by a valid slot_mapping entry must still hold NaN."""
import copy

import pytest
import torch

from guarded import guarded, guards_intact, inner
from opchecks import kernel_path
from tolerances import exact_tolerance

FLASH = torch.ops.ascend.reshape_and_cache_flash
MLA = torch.ops.ascend.concat_and_cache_mla
ONE = torch.ones((), dtype=torch.float32)


def _slots(tokens: int, num_blocks: int, block_size: int, dtype: torch.dtype, near_end: bool = False) -> torch.Tensor:
    capacity = num_blocks * block_size
    pool = torch.arange(capacity - 4 * block_size, capacity) if near_end else torch.arange(capacity)
    slots = pool[torch.randperm(len(pool))[:tokens]]
    slots[1::4] = -1  # padding tokens
    return slots.to(dtype)


def _nan_cache(*shape, dtype) -> torch.Tensor:
    return torch.full(shape, float("nan"), dtype=dtype)


def _run_both_exact(op, args, mutated, slots, block_size):
    ref_args, tri_args = copy.deepcopy(list(args)), copy.deepcopy(list(args))
    with kernel_path("reference"):
        op(*ref_args)
    with kernel_path("triton"):
        op(*tri_args)
    targeted = torch.zeros(args[mutated[0]].shape[0] * block_size, dtype=torch.bool)
    targeted[slots[slots >= 0].long()] = True
    for i in mutated:
        torch.testing.assert_close(tri_args[i], ref_args[i], **exact_tolerance(ref_args[i].dtype), equal_nan=True)
        flat = tri_args[i].reshape(targeted.shape[0], -1)
        assert flat[~targeted].isnan().all(), "a slot outside slot_mapping was written"
        assert not flat[targeted].isnan().any()


@pytest.mark.parametrize("block_size", [16, 64, 128])
@pytest.mark.parametrize("heads,head_size", [(3, 64), (2, 128), (1, 256)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_flash(block_size, heads, head_size, dtype):
    tokens, blocks = 11, 3
    key, value = torch.randn(tokens, heads, head_size, dtype=dtype), torch.randn(tokens, heads, head_size, dtype=dtype)
    key_cache = _nan_cache(blocks, block_size, heads, head_size, dtype=dtype)
    slots = _slots(tokens, blocks, block_size, torch.int64)
    args = [key, value, key_cache, key_cache.clone(), slots, "auto", ONE, ONE]
    _run_both_exact(FLASH, args, [2, 3], slots, block_size)


@pytest.mark.parametrize("slot_dtype", [torch.int32, torch.int64])
def test_flash_strided_inputs_and_cache(slot_dtype):
    # key/value are views into a fused qkv projection (strided tokens); the caches are the K and V
    # halves of one [num_blocks, 2, block_size, heads, head_size] allocation (strided blocks).
    tokens, blocks, block_size, heads, dim = 83, 7, 16, 2, 64
    qkv = torch.randn(tokens, (4 + 2 * heads) * dim + 8)
    key = qkv[:, 4 * dim : (4 + heads) * dim].view(tokens, heads, dim)
    value = qkv[:, (4 + heads) * dim : (4 + 2 * heads) * dim].view(tokens, heads, dim)
    kv = _nan_cache(blocks, 2, block_size, heads, dim, dtype=torch.float32)
    slots = _slots(tokens, blocks, block_size, slot_dtype)
    assert key.stride(0) == qkv.shape[1] and not kv[:, 0].is_contiguous()

    def op(qkv, kv, slots):  # the views are rebuilt on run_both's copies
        FLASH(qkv[:, 4 * dim : (4 + heads) * dim].view(tokens, heads, dim),
              qkv[:, (4 + heads) * dim : (4 + 2 * heads) * dim].view(tokens, heads, dim),
              kv[:, 0], kv[:, 1], slots, "auto", ONE, ONE)

    ref, tri = copy.deepcopy([qkv, kv]), copy.deepcopy([qkv, kv])
    with kernel_path("reference"):
        op(*ref, slots)
    with kernel_path("triton"):
        op(*tri, slots)
    torch.testing.assert_close(tri[1], ref[1], rtol=0, atol=0, equal_nan=True)
    valid = slots >= 0
    flat = slots[valid].long()
    assert torch.equal(tri[1][:, 0].reshape(-1, heads, dim)[flat], key[valid])
    assert torch.equal(tri[1][:, 1].reshape(-1, heads, dim)[flat], value[valid])


def test_flash_padded_batch_and_empty():
    # slot_mapping shorter than key (graph padding): trailing key rows are ignored.
    key = torch.randn(9, 1, 64)
    cache = _nan_cache(2, 16, 1, 64, dtype=torch.float32)
    slots = torch.tensor([5, -1, 17, 0, 31])
    _run_both_exact(FLASH, [key, key.clone(), cache, cache.clone(), slots, "auto", ONE, ONE], [2, 3], slots, 16)
    empty = torch.empty(0, dtype=torch.int64)
    _run_both_exact(FLASH, [key, key.clone(), cache, cache.clone(), empty, "auto", ONE, ONE], [2, 3], empty, 16)


@pytest.mark.parametrize("slot_dtype", [torch.int32, torch.int64])
def test_flash_huge_num_blocks(slot_dtype):
    # 32768 blocks × 128 slots: slot ids above 4M, targeting the last blocks (1 head of 8 dims keeps
    # each cache at 64 MB).
    blocks, block_size = 32768, 128
    key = torch.randn(9, 1, 8, dtype=torch.float16)
    cache = _nan_cache(blocks, block_size, 1, 8, dtype=torch.float16)
    slots = _slots(9, blocks, block_size, slot_dtype, near_end=True)
    slots[-1] = blocks * block_size - 1
    _run_both_exact(FLASH, [key, key.clone(), cache, cache.clone(), slots, "auto", ONE, ONE], [2, 3], slots, block_size)


@pytest.mark.parametrize("block_size", [16, 64, 128])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_mla(block_size, dtype):
    # DeepSeek-V2 layout: kv_lora_rank 512 + rope 64, both slices of one projection output.
    tokens, blocks = 7, 2
    latent = torch.randn(tokens, 512 + 64 + 24, dtype=dtype)
    cache = _nan_cache(blocks, block_size, 576, dtype=dtype)
    slots = _slots(tokens, blocks, block_size, torch.int64)
    _run_both_exact(MLA, [latent[:, :512], latent[:, 512:576], cache, slots, "auto", ONE], [2], slots, block_size)


@pytest.mark.parametrize("slot_dtype", [torch.int32, torch.int64])
def test_mla_odd_widths_and_3d_k_pe(slot_dtype):
    tokens, blocks, block_size = 83, 11, 16
    kv_c, k_pe = torch.randn(tokens, 80), torch.randn(tokens, 1, 24)
    cache = _nan_cache(blocks, block_size, 104, dtype=torch.float32)
    slots = _slots(tokens, blocks, block_size, slot_dtype)
    _run_both_exact(MLA, [kv_c, k_pe, cache, slots, "auto", ONE], [2], slots, block_size)


def test_mla_huge_num_blocks():
    blocks, block_size = 32768, 64
    kv_c, k_pe = torch.randn(5, 8, dtype=torch.bfloat16), torch.randn(5, 8, dtype=torch.bfloat16)
    cache = _nan_cache(blocks, block_size, 16, dtype=torch.bfloat16)
    slots = _slots(5, blocks, block_size, torch.int64, near_end=True)
    _run_both_exact(MLA, [kv_c, k_pe, cache, slots, "auto", ONE], [2], slots, block_size)


def _untouched(*shape, dtype) -> torch.Tensor:
    """A cache over 2^31 elements: virtual memory only, pages are touched where written."""
    try:
        return torch.empty(shape, dtype=dtype)
    except RuntimeError as exc:  # overcommit disabled or a small machine
        pytest.skip(f"cannot reserve a >2^31-element cache: {exc}")


def test_flash_offsets_past_2_31_elements(triton_path):
    # K and V halves of one [32768, 2, 128, 8, 64] fp16 allocation (2^32 elements, 8 GiB virtual):
    # the last block starts past 2^32, so an int32 block × block-stride product would wrap (under
    # the interpreter that is a wild store and a crash).
    kv = _untouched(32768, 2, 128, 8, 64, dtype=torch.float16)
    kv[-8:] = float("nan")  # poison only the target blocks
    key, value = torch.randn(3, 8, 64, dtype=torch.float16), torch.randn(3, 8, 64, dtype=torch.float16)
    slots = torch.tensor([32768 * 128 - 1, -1, 32762 * 128 + 5], dtype=torch.int32)
    FLASH(key, value, kv[:, 0], kv[:, 1], slots, "auto", ONE, ONE)
    assert torch.equal(kv[32767, 0, 127], key[0]) and torch.equal(kv[32767, 1, 127], value[0])
    assert torch.equal(kv[32762, 0, 5], key[2]) and torch.equal(kv[32762, 1, 5], value[2])
    assert kv[-8:].isnan().sum() == kv[-8:].numel() - 4 * 8 * 64


def test_mla_offsets_past_2_31_elements(triton_path):
    cache = _untouched(32768, 128, 576, dtype=torch.bfloat16)  # 2.4e9 elements
    cache[-2:] = float("nan")
    kv_c, k_pe = torch.randn(2, 512, dtype=torch.bfloat16), torch.randn(2, 64, dtype=torch.bfloat16)
    slots = torch.tensor([32768 * 128 - 1, 32767 * 128 - 2])
    MLA(kv_c, k_pe, cache, slots, "auto", ONE)
    assert torch.equal(cache[32767, 127], torch.cat((kv_c[0], k_pe[0])))
    assert torch.equal(cache[32766, 126], torch.cat((kv_c[1], k_pe[1])))
    assert cache[-2:].isnan().sum() == cache[-2:].numel() - 2 * 576


def _bad_slots(tokens: int, num_blocks: int, block_size: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(slots with out-of-range entries of each kind mixed in, the same with those entries -1)."""
    capacity = num_blocks * block_size
    slots = _slots(tokens, num_blocks, block_size, torch.int64)
    # Too large by one, by a block and a bit (both land in the guard blocks); negative but not -1.
    bad = torch.tensor([capacity, capacity + block_size + 3, -2, -block_size - 1])
    slots[2:2 + 4 * 2:2] = bad
    clean = slots.where((slots >= 0) & (slots < capacity), -1)
    return slots.to(dtype), clean.to(dtype)


@pytest.mark.parametrize("slot_dtype", [torch.int32, torch.int64])
def test_flash_out_of_range_slots_skipped(slot_dtype):
    tokens, blocks, block_size, heads, dim = 13, 3, 16, 2, 32
    key, value = torch.randn(tokens, heads, dim), torch.randn(tokens, heads, dim)
    slots, clean = _bad_slots(tokens, blocks, block_size, slot_dtype)
    expect = [_nan_cache(blocks, block_size, heads, dim, dtype=torch.float32) for _ in range(2)]
    with kernel_path("reference"):  # the in-range subset alone
        FLASH(key, value, *expect, clean, "auto", ONE, ONE)
    for path in ("reference", "triton"):
        bufs = [guarded(_nan_cache(blocks, block_size, heads, dim, dtype=torch.float32)) for _ in range(2)]
        with kernel_path(path):
            FLASH(key, value, inner(bufs[0]), inner(bufs[1]), slots, "auto", ONE, ONE)
        for buf, exp in zip(bufs, expect):
            assert guards_intact(buf), path
            torch.testing.assert_close(inner(buf), exp, rtol=0, atol=0, equal_nan=True)


def test_mla_out_of_range_slots_skipped():
    tokens, blocks, block_size = 11, 2, 16
    kv_c, k_pe = torch.randn(tokens, 48), torch.randn(tokens, 16)
    slots, clean = _bad_slots(tokens, blocks, block_size, torch.int64)
    expect = _nan_cache(blocks, block_size, 64, dtype=torch.float32)
    with kernel_path("reference"):
        MLA(kv_c, k_pe, expect, clean, "auto", ONE)
    for path in ("reference", "triton"):
        buf = guarded(_nan_cache(blocks, block_size, 64, dtype=torch.float32))
        with kernel_path(path):
            MLA(kv_c, k_pe, inner(buf), slots, "auto", ONE)
        assert guards_intact(buf), path
        torch.testing.assert_close(inner(buf), expect, rtol=0, atol=0, equal_nan=True)


def _run_both_int8(op, args, mutated):
    """The int8 write on both paths, bit for bit: int8 values and fp32 scales (NaN where the scale
    cache was not written, or for a NaN/inf row) alike."""
    ref_args, tri_args = copy.deepcopy(list(args)), copy.deepcopy(list(args))
    with kernel_path("reference"):
        op(*ref_args)
    with kernel_path("triton"):
        op(*tri_args)
    for i in mutated:
        torch.testing.assert_close(tri_args[i], ref_args[i], **exact_tolerance(ref_args[i].dtype), equal_nan=True)
    return tri_args


def _special(x: torch.Tensor) -> torch.Tensor:
    """Rows of every kind the quantizer treats apart: zero, NaN, -inf, huge, and a rounding tie."""
    x = x.clone()
    x[0, 0] = 0.0
    x[2, -1, 1] = float("nan")
    x[3, 0, 2] = float("-inf")
    x[4, -1] *= 1e30
    x[5, 0, :3] = torch.tensor([127.0, 0.5, -1.5]).to(x.dtype)  # scale 1: 0.5 and -1.5 are ties
    return x


@pytest.mark.parametrize("heads,head_size,block_size,dtype", [(3, 40, 16, torch.float32), (2, 128, 64, torch.bfloat16)])
def test_flash_int8_matches_reference(heads, head_size, block_size, dtype):
    tokens, blocks = 11, 3
    key = _special(torch.randn(tokens, heads, head_size, dtype=dtype))
    value = (torch.randn(tokens, heads + 1, head_size, dtype=dtype) * 5)[:, 1:]  # strided heads
    slots = _slots(tokens, blocks, block_size, torch.int64)
    old = torch.randint(-127, 128, (blocks, block_size, heads, head_size), dtype=torch.int8)
    scales = torch.full((blocks, heads, block_size), float("nan"))
    dynamic = _run_both_int8(FLASH, [key, value, old, old.clone(), slots, "int8", ONE, ONE, scales, scales.clone()],
                             [2, 3, 8, 9])
    assert torch.equal(dynamic[2].view(-1, heads, head_size)[slots[1]], old.view(-1, heads, head_size)[slots[1]])
    assert not dynamic[8].isnan().all()
    per_head = torch.rand(heads) / 20 + 0.01
    _run_both_int8(FLASH, [key, value, old, old.clone(), slots, "int8", per_head, torch.tensor(0.03)], [2, 3])


def test_mla_int8_matches_reference():
    tokens, blocks, block_size = 7, 2, 16
    latent = torch.randn(tokens, 80 + 24 + 8)
    latent[:, 80:104] *= 30
    latent[2, 5] = float("inf")
    latent[4, :80] = 0.0
    slots = _slots(tokens, blocks, block_size, torch.int32)
    cache = torch.randint(-127, 128, (blocks, block_size, 104), dtype=torch.int8)
    scales = torch.full((blocks, 2, block_size), float("nan"))
    _run_both_int8(MLA, [latent[:, :80], latent[:, 80:104], cache, slots, "int8", ONE, scales], [2, 6])
    _run_both_int8(MLA, [latent[:, :80], latent[:, 80:104], cache, slots, "int8", torch.tensor(0.05)], [2])
