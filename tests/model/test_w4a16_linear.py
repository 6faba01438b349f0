"""Linear's W4A16 kind: the shell's parameters, which path runs (torch's int4pack kernel for bf16
decode-sized batches on an AVX2 / AVX-512 CPU, the exact op otherwise), the int4pack
convention w = (q − 8)·scale + zero, its bf16 numerics, staleness, deep copies, state_dict, the
tensor-parallel group check, and bad group sizes.

bf16 bound for the int4pack path against the float64 value of the exact weights: its scale and
zero are rounded to bf16 (2^-9 relative each) and its output once more; on unit-scale outputs
(tests/ops/_w4a16.py's data, |y| up to ~3.7) measured up to 0.012: atol 0.03, rtol 0.016."""
import contextlib
import copy

import pytest
import torch

import ascendtile.ops as ak
from ascendtile.model.layers import int4pack
from ascendtile.model.layers.linear import Linear
from ascendtile.model.layers.parallel_linear import RowParallelLinear
from ascendtile.model.layers.partition import Share
from ascendtile.ops.reference.w4a16 import dequantize_w4a16
from ops._w4a16 import float64_linear, float64_weight, random_w4a16

INT4PACK_BF16 = {"rtol": 1.6e-2, "atol": 3e-2}
needs_int4pack = pytest.mark.skipif(not int4pack.cpu_vectorises_int4pack(),
                                    reason="int4pack is used only where torch's CPU kernels are AVX2 / AVX-512 builds")


def _w4a16(k: int = 576, sizes=(960, 192), group_size: int = 32, dtype=torch.bfloat16, bias: bool = True,
           symmetric: bool = False) -> Linear:
    linear = Linear(k, list(sizes), bias=bias, shard_names=[f"s{i}" for i in range(len(sizes))])
    linear.to_w4a16_shell(group_size, dtype)
    qweight, scales, mins = random_w4a16(linear.out_features, k, group_size, symmetric)
    with torch.no_grad():
        linear.qweight.copy_(qweight)
        linear.scales.copy_(scales)
        linear.mins.copy_(mins)
        if bias:
            linear.bias = torch.nn.Parameter(torch.randn(linear.out_features).to(dtype), requires_grad=False)
    linear.prepack()
    return linear


@pytest.fixture
def calls(monkeypatch):
    """Counts of the int4pack path's and the op's calls (the path, not torch's kernel: a patched
    torch builtin left Dynamo unable to trace the real one in a later test of the same process)."""
    counts = {"int4pack": 0, "op": 0}
    kernel, op = int4pack.Int4Pack.linear, ak.w4a16_linear

    def counted(name, fn):
        def run(*args, **kwargs):
            counts[name] += 1
            return fn(*args, **kwargs)
        return run

    monkeypatch.setattr(int4pack.Int4Pack, "linear", counted("int4pack", kernel))
    monkeypatch.setattr(ak, "w4a16_linear", counted("op", op))
    return counts


def test_shell_parameters_and_state_dict():
    linear = _w4a16(bias=False, dtype=torch.float32)
    assert linear.kind == "w4a16" and linear.quantized and linear.weight is None
    assert (linear.qweight.dtype, tuple(linear.qweight.shape)) == (torch.uint8, (1152, 288))
    assert tuple(linear.scales.shape) == tuple(linear.mins.shape) == (1152, 18)
    assert sorted(linear.state_dict()) == ["mins", "qweight", "scales"]  # the int4pack copy is not state
    want = dequantize_w4a16(linear.qweight, linear.scales, linear.mins, 32)
    assert torch.equal(linear.dequantized_weight(torch.float32), want)
    assert "w4a16, group_size=32" in repr(linear)


def test_fp32_runs_the_exact_op(calls):
    linear = _w4a16(dtype=torch.float32, bias=False)
    assert linear.packed is None  # fp32 activations: torch's kernel is unvectorised for them
    x = torch.randn(5, 576)
    y = linear(x)
    assert calls == {"int4pack": 0, "op": 1}
    assert torch.equal(y, ak.w4a16_linear(x, linear.qweight, linear.scales, linear.mins, 32, None))
    torch.testing.assert_close(y.double(), float64_linear(x.double(), linear.qweight, linear.scales, linear.mins, 32, None),
                               rtol=1.3e-6, atol=1e-5)


@needs_int4pack
@pytest.mark.parametrize("rows", [1, 7, int4pack.INT4PACK_MAX_ROWS])
def test_bf16_small_batches_take_int4pack(rows, calls):
    linear = _w4a16()
    assert isinstance(linear.packed, int4pack.Int4Pack) and "int4pack" in repr(linear)
    x = torch.randn(rows, 576).bfloat16()
    y = linear(x)
    assert calls == {"int4pack": 1, "op": 0}
    assert y.dtype == torch.bfloat16 and y.shape == (rows, 1152)
    torch.testing.assert_close(y, float64_linear(x, linear.qweight, linear.scales, linear.mins, 32, linear.bias),
                               **INT4PACK_BF16)


@needs_int4pack
def test_bf16_large_batches_and_3d_inputs(calls):
    linear = _w4a16()
    x = torch.randn(int4pack.INT4PACK_MAX_ROWS + 1, 576).bfloat16()
    assert torch.equal(linear(x), ak.w4a16_linear(x, linear.qweight, linear.scales, linear.mins, 32, linear.bias))
    assert calls["int4pack"] == 0  # prefill-sized: the op (dequantize + fp32 GEMM) is faster
    x3 = torch.randn(2, 3, 576).bfloat16()[:, ::2]  # [2, 2, 576], rows strided
    y = linear(x3)
    assert calls["int4pack"] == 1 and y.shape == (2, 2, 1152)
    torch.testing.assert_close(y, linear(x3.contiguous()), rtol=0, atol=0)


@needs_int4pack
def test_int4pack_convention_is_q_minus_8():
    """With scales and zeros exact in bf16, torch's kernel multiplies by exactly our fp32 weights:
    only the output rounding and summation order differ (a wrong zero convention is off by 8·scale)."""
    n, k = 64, 256
    qweight = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8)
    scales = (torch.randint(1, 16, (n, k // 32)) * 2.0 ** -9).float()  # 4 significant bits
    zero = torch.randint(0, 16, (n, k // 32)).float()
    mins = -zero * scales  # min + 8·scale = (8 − z)·scale: exact in bf16
    packed = int4pack.pack_int4(qweight, scales, mins, 32, torch.bfloat16)
    x = torch.randn(3, k).bfloat16()
    want = (x.double() @ float64_weight(qweight, scales, mins, 32).t())
    torch.testing.assert_close(packed.linear(x, None).double(), want, rtol=8e-3, atol=1e-3)


@needs_int4pack
@pytest.mark.parametrize("k,group_size,kernel_group", [(768, 256, 256), (576, 192, 64), (576, 576, 64)])
def test_groups_the_kernel_lacks_repeat_their_scales(k, group_size, kernel_group):
    linear = _w4a16(k, group_size=group_size, sizes=(48,), symmetric=True)
    assert linear.packed.group_size == kernel_group
    x = torch.randn(4, k).bfloat16()
    torch.testing.assert_close(linear(x), float64_linear(x, linear.qweight, linear.scales, linear.mins, group_size,
                                                         linear.bias), **INT4PACK_BF16)


def test_no_int4pack_where_it_cannot_help(monkeypatch):
    assert _w4a16(sizes=(40,)).packed is None  # N not a multiple of 16
    assert _w4a16(dtype=torch.float16).packed is None  # fp16: unvectorised on CPUs without AVX-512 FP16
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "DEFAULT")  # e.g. ATEN_CPU_CAPABILITY=default
    assert _w4a16().packed is None
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")  # no bf16 dot products needed
    assert _w4a16().packed is not None


@needs_int4pack
def test_compiled_graphs_take_the_pack_only_where_guards_run():
    """While Dynamo traces (every input dim dynamic) a linear takes the pack only inside
    int4pack.guarded_graph() (CPU level 2's decode graph, whose guards run); elsewhere it keeps the
    exact op, so a graph run without guards never depends on the row bound."""
    linear = _w4a16()
    for guarded in (False, True):
        graphs = []

        def backend(gm, example_inputs):
            graphs.append(" ".join(str(node.target) for node in gm.graph.nodes))
            return gm.forward

        torch._dynamo.reset()
        compiled = torch.compile(linear, backend=backend, dynamic=True, fullgraph=True)
        with int4pack.guarded_graph() if guarded else contextlib.nullcontext():
            for rows in (3, 5):
                x = torch.randn(rows, 576).bfloat16()
                want = (linear.packed.linear(x, linear.bias) if guarded else
                        ak.w4a16_linear(x, linear.qweight, linear.scales, linear.mins, 32, linear.bias))
                assert torch.equal(compiled(x), want)
        assert len(graphs) == 1
        assert ("_weight_int4pack_mm_for_cpu" in graphs[0]) == guarded
        assert ("w4a16_linear" in graphs[0]) != guarded


@needs_int4pack
def test_changed_weights_are_not_read_stale(calls):
    linear = _w4a16(bias=False)
    x = torch.randn(2, 576).bfloat16()
    with torch.no_grad():
        linear.scales.mul_(2)
    assert torch.equal(linear(x), ak.w4a16_linear(x, linear.qweight, linear.scales, linear.mins, 32, None))
    assert calls["int4pack"] == 0
    linear.prepack()
    linear(x)
    assert calls["int4pack"] == 1


@needs_int4pack
def test_deepcopy_packs_the_copied_weights():
    linear = _w4a16()
    clone = copy.deepcopy(linear)
    assert clone.packed is not None and clone.packed.sources[0] is clone.qweight
    x = torch.randn(2, 576).bfloat16()
    assert torch.equal(clone(x), linear(x))


@pytest.mark.parametrize("group_size", [0, 48, 96 + 1, "32", True])
def test_bad_group_size_is_named(group_size):
    with pytest.raises(ValueError, match="^group_size: "):
        Linear(576, 64).to_w4a16_shell(group_size, torch.float32)
    with pytest.raises(ValueError, match="^group_size: 256 does not divide the 576 inputs"):
        Linear(576, 64).to_w4a16_shell(256, torch.float32)


def test_row_parallel_shard_splitting_a_group_is_refused():
    # 3 ranks of 1536 inputs: 512 each, which groups of 128 tile and groups of 1536 (per channel) do not
    RowParallelLinear(Share(512, 512, 1536), 64).to_w4a16_shell(128, torch.float32)
    with pytest.raises(ValueError, match=r"^group_size: this rank's input columns \[512, 1024\) of 1536 split a "
                       r"group of 1536 \(tensor_parallel_size 3\)"):
        RowParallelLinear(Share(512, 512, 1536), 64).to_w4a16_shell(1536, torch.float32)
