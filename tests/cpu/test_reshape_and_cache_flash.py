"""The CPU KV write (ascendtile/cpu/reshape_and_cache_flash.py): the reference's writes bit for bit
(three dtypes, int32 / int64 slots, -1 and out-of-range slots skipped, key and value as strided
slices of one qkv row, caches that are strided views, more tokens than slots, odd head shapes), an
independent loop over the tokens, unwritten rows left as they were (NaN-poisoned), no tokens; bad
inputs; opcheck; the general graph's KV write retargeted where the op serves and builds."""
import pytest
import torch
from torch import fx

from ascendtile.compilation.config import default_cache_dir
from ascendtile.compilation.decompose import decompose_to_references
from ascendtile.cpu import dispatch
from ascendtile.cpu import reshape_and_cache_flash as ckv
from ascendtile.ops.reference.kv_cache import reshape_and_cache_flash

SCALE = torch.ones(1)


@pytest.fixture(scope="module", autouse=True)
def library():
    assert ckv.load(default_cache_dir())


def _run(*args):
    calls = ckv.calls
    torch.ops.ascendtile.cpu_reshape_and_cache_flash(*args)
    assert ckv.calls == calls + 1


def _operands(dtype, tokens, heads, dim, num_blocks, block_size, strided_caches, gen):
    """key / value as slices of one qkv row per token (2 query heads a KV head before them), and
    NaN-poisoned caches: contiguous, or the K and V halves of one [blocks, 2, block_size, KVH, D]."""
    qkv = torch.randn(tokens, 4 * heads, dim, generator=gen).to(dtype)
    key, value = qkv[:, 2 * heads:3 * heads], qkv[:, 3 * heads:]
    shape = (num_blocks, block_size, heads, dim)
    if strided_caches:
        both = torch.full((num_blocks, 2, block_size, heads, dim), float("nan"), dtype=dtype)
        return key, value, both[:, 0], both[:, 1]
    return key, value, torch.full(shape, float("nan"), dtype=dtype), torch.full(shape, float("nan"), dtype=dtype)


def _same(got, want):
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("slot_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("heads, dim, block_size, strided_caches", [
    (3, 64, 16, False),  # SmolLM2's KV heads, one run of memory a token
    (1, 40, 5, True),  # an odd head dim and block size, strided caches: a copy per head
    (5, 8, 3, True),
])
def test_equal_to_the_reference(dtype, slot_dtype, heads, dim, block_size, strided_caches):
    gen = torch.Generator().manual_seed(7)
    num_blocks, tokens = 13, 150  # 150 tokens: several threads' ranges
    key, value, key_cache, value_cache = _operands(dtype, tokens + 3, heads, dim, num_blocks, block_size,
                                                   strided_caches, gen)
    slots = torch.randperm(num_blocks * block_size, generator=gen)[:tokens]
    slots[::7] = -1  # padding
    slots[3], slots[10] = num_blocks * block_size, -5  # out of range: skipped too
    slots = slots.to(slot_dtype)
    want_k, want_v = key_cache.clone(), value_cache.clone()
    reshape_and_cache_flash(key, value, want_k, want_v, slots, "auto", SCALE, SCALE)
    _run(key, value, key_cache, value_cache, slots)
    _same(key_cache, want_k)
    _same(value_cache, want_v)
    assert key_cache.isnan().any()  # rows no slot names stay poisoned


def test_matches_a_loop_over_the_tokens():
    gen = torch.Generator().manual_seed(1)
    key, value, key_cache, value_cache = _operands(torch.float32, 9, 2, 16, 4, 4, False, gen)
    slots = torch.tensor([5, -1, 0, 15, 16, 7, -1, 2, 9])
    _run(key, value, key_cache, value_cache, slots)
    for cache, rows in ((key_cache, key), (value_cache, value)):
        want = torch.full_like(cache, float("nan"))
        for t, slot in enumerate(slots.tolist()):
            if 0 <= slot < 16:
                want[slot // 4, slot % 4] = rows[t]
        _same(cache, want)


def test_no_tokens():
    cache = torch.full((2, 4, 1, 8), float("nan"))
    _run(torch.empty(0, 1, 8), torch.empty(0, 1, 8), cache, cache.clone(), torch.empty(0, dtype=torch.long))
    assert cache.isnan().all()


@pytest.mark.parametrize("change, match", [
    (lambda a: {**a, "key": a["key"][:, 0]}, r"^key: fp32, bf16 or fp16 \[T, KVH, D\]"),
    (lambda a: {**a, "key": a["key"].double(), "value": a["value"].double()}, "^key: fp32, bf16 or fp16"),
    (lambda a: {**a, "key": a["key"].transpose(1, 2).contiguous().transpose(1, 2)}, "^key: .* last dim contiguous"),
    (lambda a: {**a, "value": a["value"][:5]}, r"^value: expected key's torch.float32 \(6, 2, 16\)"),
    (lambda a: {**a, "value": a["value"].half()}, "^value: expected key's"),
    (lambda a: {**a, "key_cache": a["key_cache"][:, :, :1]},
     r"^key_cache: expected torch.float32 \[num_blocks, block_size, 2, 16\]"),
    (lambda a: {**a, "key_cache": a["key_cache"].bfloat16()}, "^key_cache: expected torch.float32"),
    (lambda a: {**a, "value_cache": a["value_cache"][:3]}, "^value_cache: expected key_cache's"),
    (lambda a: {**a, "slot_mapping": a["slot_mapping"].float()}, "^slot_mapping: contiguous int32 / int64"),
    (lambda a: {**a, "slot_mapping": torch.arange(7)}, r"^slot_mapping: .* S <= key's 6 tokens"),
    (lambda a: {**a, "slot_mapping": torch.arange(12)[::2]}, "^slot_mapping: contiguous"),
])
def test_bad_inputs_name_the_argument(change, match):
    args = dict(key=torch.randn(6, 2, 16), value=torch.randn(6, 2, 16), key_cache=torch.zeros(4, 4, 2, 16),
                value_cache=torch.zeros(4, 4, 2, 16), slot_mapping=torch.arange(6))
    with pytest.raises(ValueError, match=match):
        torch.ops.ascendtile.cpu_reshape_and_cache_flash(**change(args))


def test_fake_impl_and_schema():
    torch.library.opcheck(torch.ops.ascendtile.cpu_reshape_and_cache_flash.default,
                          (torch.randn(5, 2, 16), torch.randn(5, 2, 16), torch.zeros(3, 4, 2, 16),
                           torch.zeros(3, 4, 2, 16), torch.tensor([0, 5, -1, 11, 3])),
                          test_utils=("test_schema", "test_faketensor"))


def _kv_write_graph(key, value, key_cache, value_cache, slots, kv_cache_dtype="auto") -> fx.GraphModule:
    """One ascend::reshape_and_cache_flash call over placeholders carrying example values."""
    graph = fx.Graph()
    nodes = []
    for name, example in (("key", key), ("value", value), ("key_cache", key_cache), ("value_cache", value_cache),
                          ("slots", slots), ("scale", SCALE)):
        nodes.append(graph.placeholder(name))
        nodes[-1].meta["example_value"] = example
    graph.call_function(torch.ops.ascend.reshape_and_cache_flash.default,
                        (*nodes[:5], kv_cache_dtype, nodes[5], nodes[5]))
    graph.output(nodes[2])
    return fx.GraphModule(torch.nn.Module(), graph)


def test_general_graph_kv_write_becomes_the_op_where_it_serves(tmp_path, monkeypatch):
    """Float caches: retargeted, and the graph writes what the reference writes; an int8 cache, rows
    of another dtype than the cache and a failed build leave the op."""
    gen = torch.Generator().manual_seed(2)
    key, value, key_cache, value_cache = _operands(torch.bfloat16, 20, 3, 64, 4, 16, False, gen)
    slots = torch.randperm(64, generator=gen)[:20]
    slots[4] = -1
    gm = _kv_write_graph(key, value, key_cache, value_cache, slots)
    assert decompose_to_references(gm, decode=False, cache_dir=default_cache_dir()) == 1
    assert [n.target for n in gm.graph.nodes if n.op == "call_function"] == [ckv.reshape_and_cache_flash_cpu]
    want_k, want_v = key_cache.clone(), value_cache.clone()
    reshape_and_cache_flash(key, value, want_k, want_v, slots, "auto", SCALE, SCALE)
    calls = ckv.calls
    gm(key, value, key_cache, value_cache, slots, SCALE)
    assert ckv.calls == calls + 1
    _same(key_cache, want_k)
    _same(value_cache, want_v)
    int8 = torch.zeros(4, 16, 3, 64, dtype=torch.int8)
    assert decompose_to_references(_kv_write_graph(key, value, int8, int8.clone(), slots, "int8"), decode=False,
                                   cache_dir=default_cache_dir()) == 0
    fp32 = torch.zeros(4, 16, 3, 64)
    assert decompose_to_references(_kv_write_graph(key, value, fp32, fp32.clone(), slots), decode=False,
                                   cache_dir=default_cache_dir()) == 0
    monkeypatch.setattr(dispatch, "_library", None)  # as a process that loaded none
    monkeypatch.setenv("CXX", "false")  # a compiler that fails
    with pytest.warns(RuntimeWarning, match="building dispatch failed"):
        assert decompose_to_references(_kv_write_graph(key, value, key_cache, value_cache, slots), decode=False,
                                       cache_dir=str(tmp_path)) == 0
