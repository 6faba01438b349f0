"""The CPU rotary embedding kernel (ascendtile/cpu/rotary_embedding.py), built into this session's
cache: bit-equal to the rope reference (three dtypes, caches of fp32 or the tensors' dtype, neox
and GPT-J, partial rotations with an offset, odd head sizes, inverse, int32 / int64 positions,
positions outside the cache, q and k as strided slices of one qkv row, [T, H * D] views, no key,
no tokens), against the independent complex rotation; bad inputs; opcheck; the general graph's
rope retargeted where the kernel serves and builds."""
import pytest
import torch
from torch import fx

from ascendtile.compilation.config import default_cache_dir
from ascendtile.compilation.decompose import decompose_to_references
from ascendtile.cpu import dispatch
from ascendtile.cpu import rotary_embedding as cre
from ascendtile.cpu.build import DTYPES
from ascendtile.ops.reference.rope import rotary_embedding


@pytest.fixture(scope="module", autouse=True)
def kernel():
    assert cre.load(default_cache_dir(), list(DTYPES))


def _run(*args):
    calls = cre.calls
    torch.ops.ascendtile.cpu_rotary_embedding(*args)
    assert cre.calls == calls + 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("cache_fp32", [True, False])
@pytest.mark.parametrize("is_neox", [True, False])
@pytest.mark.parametrize("head_size, rot_dim, offset, inverse, flat", [
    (64, 64, 0, False, False),  # SmolLM2's heads: the vector path
    (64, 32, 16, True, True),  # a partial rotation at an offset, inverse, [T, H * D]
    (80, 24, 0, False, False),  # halves of 12: not a multiple of 8
    (16, 16, 0, False, True),
])
def test_bit_equal_to_the_reference(dtype, cache_fp32, is_neox, head_size, rot_dim, offset, inverse, flat):
    gen = torch.Generator().manual_seed(3)
    tokens = 37
    positions = torch.randint(-3, 110, (tokens,), generator=gen)  # some outside the 100-row cache
    positions = positions.int() if dtype == torch.float16 else positions
    cache = torch.randn(100, rot_dim, generator=gen).to(torch.float32 if cache_fp32 else dtype)
    qkv = torch.randn(tokens, 9 + 3 + 3, head_size, generator=gen).to(dtype)
    want, got = qkv.clone(), qkv.clone()

    def q_and_k(t):
        q, k = t[:, :9], t[:, 9:12]  # strided slices of each token's row
        return (q.flatten(1), k.flatten(1)) if flat else (q, k)

    rotary_embedding(positions, *q_and_k(want), head_size, cache, is_neox, offset, inverse)
    _run(positions, *q_and_k(got), head_size, cache, is_neox, offset, inverse)
    assert torch.equal(got, want)
    assert torch.equal(got[:, 12:], qkv[:, 12:])  # the value heads untouched
    outside = (positions < 0) | (positions >= 100)
    assert outside.any() and torch.equal(got[outside], qkv[outside])


def test_matches_the_complex_rotation():
    """Neox halves as complex numbers x1 + i x2 times e^(i theta), in fp64."""
    gen = torch.Generator().manual_seed(4)
    positions = torch.arange(20)
    theta = positions[:, None].double() * torch.rand(32, generator=gen, dtype=torch.float64)
    cache = torch.cat((theta.cos(), theta.sin()), -1).float()
    x = torch.randn(20, 5, 64, generator=gen)
    want = torch.view_as_real(torch.complex(x[..., :32].double(), x[..., 32:].double()) * torch.exp(1j * theta)[:, None])
    _run(positions, x, None, 64, cache, True, 0, False)
    torch.testing.assert_close(x.double(), torch.cat((want[..., 0], want[..., 1]), -1), rtol=1e-5, atol=1e-5)


def test_no_tokens():
    _run(torch.empty(0, dtype=torch.long), torch.empty(0, 4, 64), None, 64, torch.randn(10, 64), True, 0, False)


@pytest.mark.parametrize("change, match", [
    (lambda a: {**a, "positions": a["positions"].float()}, "^positions: contiguous int32 / int64"),
    (lambda a: {**a, "positions": a["positions"].view(2, 3)}, "^positions: contiguous int32 / int64"),
    (lambda a: {**a, "query": a["query"].transpose(1, 2).contiguous().transpose(1, 2)}, "^query: expected .6, H, 64."),
    (lambda a: {**a, "query": a["query"][:, :, :32]}, "^query: expected"),
    (lambda a: {**a, "key": a["key"].double()}, "^query / key: fp32, bf16 or fp16 alike"),
    (lambda a: {**a, "cos_sin_cache": torch.randn(10, 66)}, "^cos_sin_cache: contiguous .rows, rot_dim."),
    (lambda a: {**a, "cos_sin_cache": torch.randn(10, 63)}, "^cos_sin_cache"),
    (lambda a: {**a, "cos_sin_cache": torch.randn(64, 10).t()}, "^cos_sin_cache"),
])
def test_bad_inputs_name_the_argument(change, match):
    args = dict(positions=torch.arange(6), query=torch.randn(6, 4, 64), key=torch.randn(6, 2, 64), head_size=64,
                cos_sin_cache=torch.randn(10, 64), is_neox=True)
    with pytest.raises(ValueError, match=match):
        torch.ops.ascendtile.cpu_rotary_embedding(**change(args))


def test_not_loaded_says_so():
    """A dtype taken out of the op's table (dispatch.register with None) is named as not loaded;
    the others still run."""
    dispatch.register("cpu_rotary_embedding", (torch.float16,), None)
    try:
        torch.ops.ascendtile.cpu_rotary_embedding(torch.arange(2), torch.randn(2, 4, 64), None, 64, torch.randn(4, 64), True)
        with pytest.raises(RuntimeError, match="^cpu_rotary_embedding: the kernel is not loaded for torch.float16"):
            torch.ops.ascendtile.cpu_rotary_embedding(torch.arange(2), torch.randn(2, 4, 64).half(), None, 64,
                                                      torch.randn(4, 64), True)
    finally:
        dispatch.register("cpu_rotary_embedding", (torch.float16,), cre._kernels[torch.float16,])
    with pytest.raises(ValueError, match=r"^variants: no kernel for the dtypes \['torch.int32'\]"):
        cre.load(default_cache_dir(), [torch.int32])


def test_fake_impl_and_schema():
    torch.library.opcheck(torch.ops.ascendtile.cpu_rotary_embedding.default,
                          (torch.arange(5), torch.randn(5, 4, 32), torch.randn(5, 2, 32), 32, torch.randn(8, 32), True),
                          test_utils=("test_schema", "test_faketensor"))


def _rope_graph(positions, query, key) -> fx.GraphModule:
    """One ascend::rotary_embedding call over placeholders carrying example values."""
    graph = fx.Graph()
    nodes = []
    for name, value in (("positions", positions), ("query", query), ("key", key), ("cache", torch.randn(32, 64))):
        nodes.append(graph.placeholder(name))
        nodes[-1].meta["example_value"] = value
    graph.call_function(torch.ops.ascend.rotary_embedding.default, (nodes[0], nodes[1], nodes[2], 64, nodes[3], True))
    graph.output(nodes[1])
    return fx.GraphModule(torch.nn.Module(), graph)


def test_general_graph_rope_becomes_the_kernel_where_it_serves(tmp_path, monkeypatch):
    """Positions [T]: retargeted, and the graph rotates as the reference does; positions [B, S]
    and a failed build leave the op."""
    positions, query, key = torch.arange(6), torch.randn(6, 4, 64), torch.randn(6, 2, 64)
    gm = _rope_graph(positions, query, key)
    assert decompose_to_references(gm, decode=False, cache_dir=default_cache_dir()) == 1
    assert [n.target for n in gm.graph.nodes if n.op == "call_function"] == [cre.rotary_embedding_cpu]
    cache = torch.randn(32, 64)
    want_q, want_k = query.clone(), key.clone()
    rotary_embedding(positions, want_q, want_k, 64, cache, True)
    calls = cre.calls
    gm(positions, query, key, cache)
    assert cre.calls == calls + 1 and torch.equal(query, want_q) and torch.equal(key, want_k)
    batched = _rope_graph(positions.view(2, 3), query.view(2, 3, 4, 64), key.view(2, 3, 2, 64))
    assert decompose_to_references(batched, decode=False, cache_dir=default_cache_dir()) == 0
    monkeypatch.setattr(cre, "_kernels", {})  # as a process that loaded none
    monkeypatch.setenv("CXX", "false")  # a compiler that fails
    with pytest.warns(RuntimeWarning, match="building rotary_embedding failed"):
        assert decompose_to_references(_rope_graph(positions, query, key), decode=False, cache_dir=str(tmp_path)) == 0
