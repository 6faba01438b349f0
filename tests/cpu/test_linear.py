"""The CPU few-row linear (ascendtile/cpu/linear.py), built into this session's cache: against the
fp64 product for 1 and 2 rows (a last tile of fewer outputs, no inputs), and, on an x86 CPU with
AVX2 or AVX-512, fp32 products of 4 to 64 rows in the wide kernel (passes of 2 to 4
rows, tiles cut short); the weight's tile order and, on a CPU with AMX, bf16 products of 3 to 64
rows over it in the tile kernel (short m tiles, odd output blocks), which other CPUs' builds send
on; bad tiles;
strided 2-D and 3-D x, a weight sliced from a wider one, biases; NaN and inf staying in their row
and column; more rows, fp32's 3 and other dtypes' 3, where onednn_linear or aten would take them; bad
inputs; the fake impl; and CPU level 2's decode graph retargeting its linears where the kernel
serves and builds."""
import pytest
import torch
import torch.nn.functional as F
from torch import fx

from ascendtile.compilation.config import default_cache_dir
from ascendtile.compilation.decompose import decompose_to_references
from ascendtile.cpu import dispatch
from ascendtile.cpu import linear as cl
from ascendtile.cpu.build import DTYPES
from ascendtile.model.layers import linear as model_linear

TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 2e-3}  # 16-bit: the output rounded once


@pytest.fixture(scope="module", autouse=True)
def kernel():
    assert cl.load(default_cache_dir(), list(DTYPES))


def _operands(rows, n, k, dtype, bias=True, seed=0):
    """x [rows, 1, k] with a row stride past k; weight [n, k] sliced from a wider weight."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, 1, k + 5, generator=gen).to(dtype)[..., :k]
    weight = (torch.randn(n, k + 16, generator=gen) * 0.1).to(dtype)[:, 3:k + 3]
    b = torch.randn(n, generator=gen).to(dtype) if bias else None
    return x, weight, b


def _product(x, weight, bias):
    return F.linear(x.double(), weight.double(), None if bias is None else bias.double())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("rows", [1, 2])
@pytest.mark.parametrize("n, k, bias", [(13, 48, True), (1, 16, False), (576, 576, False), (37, 1536, True),
                                        (6, 0, True)])
def test_matches_the_fp64_product(dtype, rows, n, k, bias):
    x, weight, b = _operands(rows, n, k, dtype, bias)
    if rows == 2:  # a 2-D x (the graph's calls), its rows strided
        x = x[:, 0]
    calls = cl.calls
    out = torch.ops.ascendtile.cpu_linear(x, weight, None, b)
    assert cl.calls == calls + 1 and out.shape == (*x.shape[:-1], n) and out.dtype == dtype
    torch.testing.assert_close(out.double(), _product(x, weight, b), rtol=TOL[dtype], atol=TOL[dtype])


WIDE = cl.wide_rows() > 0  # this CPU runs the wide kernel


@pytest.mark.parametrize("rows", [3, 4, 5, 7, 9, 13, 32, 33, 64, 65])
@pytest.mark.parametrize("n, k, bias", [(13, 48, True), (1, 16, False), (576, 576, False), (37, 1536, True),
                                        (7, 0, True)])
def test_wide_rows_match_the_fp64_product(rows, n, k, bias):
    """fp32 products of 3 to 65 rows: from 4 rows to its bound (64) the wide kernel where this CPU's
    build has it (x86 with AVX2 or AVX-512; the counter grows; n not a multiple of its 6- or 3-row
    tiles, rows split into passes of 2 to 4), aten elsewhere, at 3 rows and past the bound."""
    x, weight, b = _operands(rows, n, k, torch.float32, bias)
    x = x[:, 0]  # its rows strided
    calls = cl.calls
    out = torch.ops.ascendtile.cpu_linear(x, weight, None, b)
    assert cl.calls == calls + (cl.WIDE_MIN_ROWS <= rows <= cl.wide_rows()) and out.shape == (rows, n)
    torch.testing.assert_close(out.double(), _product(x, weight, b), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_16_bit_products_past_two_rows_stay_with_aten(dtype):
    x, weight, b = _operands(3, 40, 64, dtype)
    calls = cl.calls
    out = torch.ops.ascendtile.cpu_linear(x, weight, None, b)
    assert cl.calls == calls and torch.equal(out, F.linear(x, weight, b))


TILED = cl.tiles_served()  # this CPU's build multiplies bf16 over tiles on AMX


def _tiles(weight):
    """weight [N, K] in the tile kernel's order (PackedWeight.with_tiles), a copy of the weight."""
    return model_linear.PackedWeight(weight, None, weight).with_tiles().tiles


def test_tiles_hold_pairs_of_inputs_per_output_block():
    """tiles[j, c, p, i] = weight[16 j + i, 32 c + 2 p : 32 c + 2 p + 2]; a weight that is not bf16
    or not of whole 16 x 32 tiles gets none."""
    weight = (torch.arange(48 * 64) % 251).reshape(48, 64).bfloat16()  # integers: exact in bf16
    tiles = _tiles(weight)
    assert tiles.shape == (3, 2, 16, 16, 2) and tiles.is_contiguous()
    for j, c, p, i in [(0, 0, 0, 0), (2, 1, 15, 15), (1, 0, 3, 9), (2, 1, 0, 7)]:
        assert torch.equal(tiles[j, c, p, i], weight[16 * j + i, 32 * c + 2 * p:32 * c + 2 * p + 2])
    assert _tiles(weight.float()) is None and _tiles(weight[:40]) is None and _tiles(weight[:, :48]) is None


@pytest.mark.parametrize("rows", [3, 5, 16, 17, 31, 32, 33, 48, 50, 64])
@pytest.mark.parametrize("n, k, bias", [(16, 32, True), (48, 64, False), (80, 96, True), (576, 576, False),
                                        (208, 1536, True)])
def test_tiled_rows_match_the_fp64_product(rows, n, k, bias):
    """bf16 products of 3 to 64 rows over the weight's tiles: on AMX the tile kernel (its counter;
    m tiles of 1 to 4, the last one short; output blocks not a multiple of a group), elsewhere
    onednn_linear or aten. x's rows strided, the weight sliced from a wider one."""
    x, weight, b = _operands(rows, n, k, torch.bfloat16, bias)
    x = x[:, 0]
    calls, tiled = cl.calls, cl.tiled_calls
    out = torch.ops.ascendtile.cpu_linear(x, weight, None, b, _tiles(weight))
    assert (cl.calls - calls, cl.tiled_calls - tiled) == ((1, 1) if TILED else (0, 0))
    assert out.shape == (rows, n) and out.dtype == torch.bfloat16
    torch.testing.assert_close(out.double(), _product(x, weight, b), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("rows, tiled", [(1, False), (2, False), (cl.MAX_ROWS + 1, False), (3, True)])
def test_tiles_serve_only_the_rows_between(rows, tiled, monkeypatch):
    """1 and 2 rows take the few-row kernel, more than MAX_ROWS onednn_linear (the packed copy), and
    so do the rows between where the library has no tile kernel (an AVX2 or AVX-512 CPU without
    AMX: dispatch.set_linear_kernels)."""
    x, weight, b = _operands(rows, 64, 96, torch.bfloat16)
    # the model's copy (bf16, or fp32 on a CPU without bf16 dot products, where oneDNN refuses a
    # bf16 reorder), for a weight below the packing bound
    monkeypatch.setattr(model_linear, "ONEDNN_MIN_WEIGHT_ELEMENTS", 0)
    pack = model_linear.pack_weight(weight.contiguous()).packed
    for served in {TILED, False}:
        dispatch.set_linear_kernels(wide_rows=cl.wide_rows(), tiled=served)
        try:
            calls, tiles_calls = cl.calls, cl.tiled_calls
            out = torch.ops.ascendtile.cpu_linear(x, weight, pack, b, _tiles(weight))
        finally:
            dispatch.set_linear_kernels(wide_rows=cl.wide_rows(), tiled=TILED)
        on_tiles = tiled and served
        assert (cl.calls - calls, cl.tiled_calls - tiles_calls) == (int(rows <= cl.FEW_ROWS or on_tiles), int(on_tiles))
        if not on_tiles and rows > cl.FEW_ROWS:
            assert torch.equal(out, torch.ops.ascendtile.onednn_linear(x, weight, pack, b))
        torch.testing.assert_close(out.double(), _product(x, weight, b), rtol=1e-2, atol=1e-2)


@pytest.mark.skipif(not TILED, reason="no AMX: the tile kernel is not built")
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_tiled_nan_and_inf_stay_in_their_row_and_column(bad):
    x, weight, b = _operands(19, 48, 64, torch.bfloat16)
    x = x[:, 0]
    x[1, 7] = bad
    weight[5, 40] = float("nan")
    tiled = cl.tiled_calls
    out = torch.ops.ascendtile.cpu_linear(x, weight, None, b, _tiles(weight))
    assert cl.tiled_calls == tiled + 1
    assert out[1].isinf().logical_or(out[1].isnan()).all() and out[:, 5].isnan().all()
    others = torch.cat([out[:1], out[2:]])
    assert others[:, :5].isfinite().all() and others[:, 6:].isfinite().all()
    torch.testing.assert_close(out.double(), _product(x, weight, b), rtol=1e-2, atol=1e-2, equal_nan=True)


@pytest.mark.parametrize("change, match", [
    (lambda a: {**a, "tiles": a["tiles"][:2]}, r"^tiles: expected a contiguous torch.bfloat16 \(3, 2, 16, 16, 2\)"),
    (lambda a: {**a, "tiles": a["tiles"].float()}, r"^tiles: expected .* got torch.float32"),
    (lambda a: {**a, "tiles": a["tiles"].transpose(2, 3)}, r"^tiles: expected a contiguous .* with strides"),
    (lambda a: {**a, "weight": a["weight"].float(), "x": a["x"].float()}, "^tiles: only for a bf16 weight"),
    (lambda a: {**a, "weight": a["weight"][:40]}, r"^tiles: only for a bf16 weight .* \(40, 64\)"),
])
def test_bad_tiles_name_the_argument(change, match):
    weight = torch.randn(48, 64).bfloat16()
    args = dict(x=torch.randn(4, 64).bfloat16(), weight=weight, packed=None, bias=None, tiles=_tiles(weight))
    with pytest.raises(ValueError, match=match):
        torch.ops.ascendtile.cpu_linear(**change(args))


@pytest.mark.parametrize("rows", [2, 11])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_nan_and_inf_stay_in_their_row_and_column(bad, rows):
    x, weight, b = _operands(rows, 21, 64, torch.float32)
    x[1, 0, 7] = bad
    weight[5, 40] = float("nan")
    calls = cl.calls
    out = torch.ops.ascendtile.cpu_linear(x, weight, None, b)
    assert cl.calls == calls + (rows <= cl.FEW_ROWS or WIDE)
    assert out[1].isinf().logical_or(out[1].isnan()).all() and out[:, :, 5].isnan().all()
    others = torch.cat([out[:1], out[2:]])
    assert others[..., :5].isfinite().all() and others[..., 6:].isfinite().all()
    torch.testing.assert_close(out.double(), _product(x, weight, b), rtol=1e-5, atol=1e-5, equal_nan=True)


@pytest.mark.parametrize("packed, vendor", [(True, "AuthenticAMD"), (True, "GenuineIntel"), (False, "AuthenticAMD")])
def test_more_rows_go_where_the_traced_call_sent_them(packed, vendor, monkeypatch):
    """More than MAX_ROWS rows: onednn_linear's choice over the packed copy (oneDNN; aten for an
    Intel CPU's few fp32 rows, few_rows_take_aten), else aten."""
    monkeypatch.setattr(model_linear, "cpu_vendor", lambda: vendor)
    x, weight, b = _operands(cl.MAX_ROWS + 1, 40, 64, torch.float32)
    pack = torch.ops.mkldnn._reorder_linear_weight(weight.contiguous(), 32) if packed else None
    calls = cl.calls
    out = torch.ops.ascendtile.cpu_linear(x, weight, pack, b)
    assert cl.calls == calls  # not the kernel
    onednn = packed and vendor == "AuthenticAMD"
    want = torch.ops.mkldnn._linear_pointwise(x, pack, b, "none", [], "") if onednn else F.linear(x, weight, b)
    assert torch.equal(out, want)


def test_no_rows_give_an_empty_product():
    x, weight, b = _operands(0, 9, 32, torch.bfloat16)
    assert torch.ops.ascendtile.cpu_linear(x, weight, None, b).shape == (0, 1, 9)


@pytest.mark.parametrize("change, match", [
    (lambda a: {**a, "x": a["x"].double()}, "^x: torch.float64 .* does not fit weight"),
    (lambda a: {**a, "x": a["x"][..., :32]}, r"^x: .*\(2, 32\) does not fit weight"),
    (lambda a: {**a, "weight": a["weight"][:, :24], "x": a["x"][..., :24]}, "^weight: no kernel"),
    (lambda a: {**a, "weight": a["weight"].t().contiguous().t()}, "^weight: no kernel"),
    (lambda a: {**a, "weight": a["weight"].double(), "x": a["x"].double(), "bias": None},
     "^weight: no kernel for torch.float64"),
    (lambda a: {**a, "bias": a["bias"][:5]}, r"^bias: expected torch.float32 \(8,\)"),
    (lambda a: {**a, "bias": a["bias"].half()}, r"^bias: expected torch.float32 \(8,\), got torch.float16"),
])
def test_bad_inputs_name_the_argument(change, match):
    args = dict(x=torch.randn(2, 48), weight=torch.randn(48, 48)[:8], packed=None, bias=torch.randn(8))
    with pytest.raises(ValueError, match=match):
        torch.ops.ascendtile.cpu_linear(**change(args))


def test_not_loaded_says_so():
    """A dtype taken out of the op's table (dispatch.register with None) is named as not loaded;
    the others still run, and so do its products of rows no kernel takes (the body sends those on
    before it looks for a kernel)."""
    dispatch.register("cpu_linear", (torch.bfloat16,), None)
    try:
        torch.ops.ascendtile.cpu_linear(torch.randn(1, 16), torch.randn(4, 16), None, None)
        x, weight = torch.randn(3, 16).bfloat16(), torch.randn(4, 16).bfloat16()
        assert torch.equal(torch.ops.ascendtile.cpu_linear(x, weight, None, None), F.linear(x, weight))
        with pytest.raises(RuntimeError, match="^cpu_linear: the kernel is not loaded for torch.bfloat16"):
            torch.ops.ascendtile.cpu_linear(torch.randn(1, 16).bfloat16(), torch.randn(4, 16).bfloat16(), None, None)
    finally:
        dispatch.register("cpu_linear", (torch.bfloat16,), cl._kernels[torch.bfloat16,])
    with pytest.raises(ValueError, match=r"^variants: no kernel for the dtypes \['torch.float64'\]"):
        cl.load(default_cache_dir(), [torch.float64])


def test_fake_impl_and_schema():
    x, weight, b = _operands(2, 24, 32, torch.float32)
    torch.library.opcheck(torch.ops.ascendtile.cpu_linear.default, (x, weight, None, b),
                          test_utils=("test_schema", "test_faketensor"))
    x, weight, b = _operands(5, 32, 64, torch.bfloat16)
    torch.library.opcheck(torch.ops.ascendtile.cpu_linear.default, (x[:, 0], weight, None, b, _tiles(weight)),
                          test_utils=("test_schema", "test_faketensor"))


def _linear_graph(weights: dict[str, torch.Tensor], packed: torch.Tensor | None) -> fx.GraphModule:
    """x -> one F.linear per weight (a bias on the first), plus an onednn_linear over `packed` of
    the first weight, summed; each placeholder with the example value Dynamo would record."""
    graph = fx.Graph()
    x = graph.placeholder("x")
    x.meta["example_value"] = torch.empty(1, next(iter(weights.values())).shape[1])
    nodes = {}
    for name, w in weights.items():
        nodes[name] = graph.placeholder(name)
        nodes[name].meta["example_value"] = w
    bias = graph.placeholder("bias")
    first = next(iter(weights))
    outs = [graph.call_function(torch._C._nn.linear, (x, nodes[name]), {"bias": bias} if name == first else {})
            for name in weights]
    if packed is not None:
        pack = graph.placeholder("packed")
        outs.append(graph.call_function(torch.ops.ascendtile.onednn_linear.default, (x, nodes[first], pack, None)))
    graph.output(tuple(outs))
    return fx.GraphModule(torch.nn.Module(), graph)


def test_decode_graph_linears_become_cpu_linear_where_it_serves(tmp_path):
    """Weights of at least ONEDNN_MIN_WEIGHT_ELEMENTS whose input dim is a multiple of 16: retargeted,
    with their operands; a small weight and one whose rows are not contiguous stay with aten; the general graph
    (decode=False) is left alone. The results equal the products."""
    gen = torch.Generator().manual_seed(1)
    big = torch.randn(-(-model_linear.ONEDNN_MIN_WEIGHT_ELEMENTS // 576), 576, generator=gen) * 0.05
    weights = {"big": big, "small": torch.randn(16, 576, generator=gen), "columns": torch.randn(576, 440, generator=gen).t()}
    packed = torch.ops.mkldnn._reorder_linear_weight(big, 32)
    general = _linear_graph(weights, packed)
    assert decompose_to_references(general, decode=False, cache_dir=str(tmp_path)) == 0
    gm = _linear_graph(weights, packed)
    assert decompose_to_references(gm, decode=True, cache_dir=default_cache_dir()) == 2
    targets = [node.target for node in gm.graph.nodes if node.op == "call_function"]
    cpu_linear = torch.ops.ascendtile.cpu_linear.default
    assert targets == [cpu_linear, torch._C._nn.linear, torch._C._nn.linear, cpu_linear]
    x, bias = torch.randn(1, 576, generator=gen), torch.randn(big.shape[0], generator=gen)
    calls = cl.calls
    got = gm(x, *weights.values(), bias, packed)
    assert cl.calls == calls + 2
    want = [F.linear(x, big, bias), F.linear(x, weights["small"]), None, F.linear(x, big)]
    for g, w in zip(got, want):
        if w is not None:
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


def test_without_a_compiler_the_decode_graph_keeps_its_linears(tmp_path, monkeypatch):
    monkeypatch.setattr(cl, "_kernels", {})  # as a process that loaded none
    monkeypatch.setenv("CXX", "false")  # a compiler that fails
    big = torch.randn(-(-model_linear.ONEDNN_MIN_WEIGHT_ELEMENTS // 576), 576)
    gm = _linear_graph({"big": big}, None)
    with pytest.warns(RuntimeWarning, match="building linear failed"):
        assert decompose_to_references(gm, decode=True, cache_dir=str(tmp_path)) == 0
    assert [node.target for node in gm.graph.nodes if node.op == "call_function"] == [torch._C._nn.linear]
