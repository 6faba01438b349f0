"""Linear's oneDNN prepacking on CPU fp32 and bf16 (packed as bf16 where the CPU has bf16 dot
products, else widened to fp32): same outputs as the plain matmul, a clean fallback where oneDNN
cannot help, never a stale read after the weight changes, and the tied LM head packed too. Without
bf16 dot products, bf16 products of prefills and decode batches run in fp32."""
import copy
import math

import pytest
import torch
import torch.nn.functional as F

from ascendtile.model.layers import linear as linear_module
from ascendtile.model.layers.linear import Linear, pack_weight

needs_onednn = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="torch built without oneDNN")


@pytest.fixture(autouse=True)
def pack_any_size(request, monkeypatch):
    """The tests' small weights take the packed path (production packs only big ones), except in
    the test of that size bound itself."""
    if "size_bound" not in request.node.name:
        monkeypatch.setattr(linear_module, "ONEDNN_MIN_WEIGHT_ELEMENTS", 0)


def _linear(bias: bool = True, dtype=torch.float32) -> Linear:
    linear = Linear(48, [40, 24], bias=bias, shard_names=["a", "b"]).to(dtype)
    torch.manual_seed(0)
    linear.weight.data.normal_()
    if bias:
        linear.bias.data.normal_()
    return linear


@needs_onednn
@pytest.mark.parametrize("rows", [0, 1, 7, 33])
def test_packed_matches_plain_matmul(rows):
    linear = _linear()
    linear.prepack()
    assert linear.packed is not None
    x = torch.randn(rows, 48)
    torch.testing.assert_close(linear(x), F.linear(x, linear.weight, linear.bias))


@needs_onednn
@pytest.mark.parametrize("rows", [1, 33])
def test_bf16_packs_as_bf16_with_bf16_dot_products(rows):
    linear = _linear(dtype=torch.bfloat16)
    linear.prepack()
    expected_dtype = torch.bfloat16 if linear_module.cpu_has_bf16_dot() else torch.float32
    assert linear.packed is not None and linear.packed.packed.dtype == expected_dtype
    x = torch.randn(rows, 48, dtype=torch.bfloat16)
    # both accumulate in fp32 and round once: equal up to the summation order
    torch.testing.assert_close(linear(x), F.linear(x, linear.weight, linear.bias), rtol=1.6e-2, atol=1e-2)


@needs_onednn
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(0, 48), (1, 48), (2, 48), (33, 48), (3, 11, 48)])
def test_bf16_without_bf16_dot_products_packs_fp32(shape, bias, monkeypatch):
    """Without bf16 dot products (AVX2) a bf16 weight is packed widened to fp32 (exact): products
    of WIDE_PACK_MIN_ROWS rows or more multiply x widened to fp32 on that copy and round once, the
    fp32 product of the bf16 values; a single row reads the bf16 weight through aten. The same
    through the op a decode graph calls (onednn_linear, opaque there)."""
    monkeypatch.setattr(linear_module, "cpu_has_bf16_dot", lambda: False)
    linear = _linear(bias=bias, dtype=torch.bfloat16)
    linear.prepack()
    assert linear.packed.packed.dtype == torch.float32
    assert torch.equal(linear.packed.packed.to_dense(), linear.weight.float())
    onednn, aten, plain_onednn, plain_linear = [], [], torch.ops.mkldnn._linear_pointwise, F.linear
    monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise",
                        lambda x, *args: onednn.append((x.dtype, args[0].dtype)) or plain_onednn(x, *args))
    monkeypatch.setattr(linear_module.F, "linear",
                        lambda x, w, b=None: aten.append((x.dtype, w.dtype)) or plain_linear(x, w, b))
    x = torch.randn(shape, dtype=torch.bfloat16)
    if x.numel():
        x.view(-1, 48)[0, 7] = float("nan")  # a NaN row stays NaN, the others are untouched by it
    wide = math.prod(shape[:-1]) >= linear_module.WIDE_PACK_MIN_ROWS == 2
    for out in (linear(x), torch.ops.ascendtile.onednn_linear.default(x, linear.weight, linear.packed.packed,
                                                                      linear.bias)):
        assert out.dtype == torch.bfloat16 and out.shape == (*shape[:-1], 64)
        expected = plain_linear(x.float(), linear.weight.float(), linear.bias.float() if bias else None).bfloat16()
        torch.testing.assert_close(out, expected, rtol=1.6e-2, atol=1e-2, equal_nan=True)  # up to the summation order
        flat = out.reshape(-1, 64)
        if x.numel():
            assert flat[0].isnan().all() and not flat[1:].isnan().any()
    assert onednn == ([(torch.float32, torch.float32)] * 2 if wide else [])
    assert aten == ([] if wide else [(torch.bfloat16, torch.bfloat16)] * 2)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("has_bf16_dot", [False, True])
@pytest.mark.parametrize("shape", [(15, 48), (16, 48), (2, 9, 48), (1, 48)])
def test_bf16_batches_without_bf16_dot_products_run_in_fp32(shape, has_bf16_dot, bias, monkeypatch):
    """Without bf16 dot products (AVX2), bf16 products of BF16_AS_FP32_MIN_ROWS rows or more take
    fp32 operands, the weight widened WIDEN_CHUNK_ELEMENTS at a time (5 of its 64 rows here: 13
    chunks, the last one short), and round once, bit for bit as over a whole fp32 copy; fewer rows,
    or a CPU with them, keep aten's (or oneDNN's) bf16."""
    monkeypatch.setattr(linear_module, "cpu_has_bf16_dot", lambda: has_bf16_dot)
    monkeypatch.setattr(linear_module, "WIDEN_CHUNK_ELEMENTS", 5 * 48)
    linear = _linear(bias=bias, dtype=torch.bfloat16)  # not packed: the test follows the matmuls' operands
    bf16_calls, chunks, plain = [], [], F.linear
    monkeypatch.setattr(linear_module.F, "linear",
                        lambda x, w, b=None: bf16_calls.append((x.dtype, w.dtype)) or plain(x, w, b))
    for name in ("mm", "addmm"):
        real = getattr(torch, name)
        monkeypatch.setattr(torch, name, lambda *args, real=real, **kw: chunks.append(
            tuple(a.dtype for a in args[-2:]) + (kw["out"].shape[1],)) or real(*args, **kw))
    x = torch.randn(shape, dtype=torch.bfloat16)
    x[0, 0] = float("nan")  # a NaN row stays NaN, the others are untouched by it
    out = linear(x)
    wide = math.prod(shape[:-1]) >= linear_module.BF16_AS_FP32_MIN_ROWS == 16 and not has_bf16_dot
    assert bf16_calls == ([] if wide else [(torch.bfloat16, torch.bfloat16)])
    assert chunks == ([(torch.float32, torch.float32, 5)] * 12 + [(torch.float32, torch.float32, 4)] if wide else [])
    assert out.dtype == torch.bfloat16 and out.shape == (*shape[:-1], 64)
    expected = plain(x.float(), linear.weight.float(), linear.bias.float() if bias else None).bfloat16()
    if wide:
        assert torch.equal(out.nan_to_num(7.0), expected.nan_to_num(7.0))
    else:  # aten's bf16 GEMM accumulates in fp32 too: equal up to the summation order
        torch.testing.assert_close(out, expected, rtol=1.6e-2, atol=1e-2, equal_nan=True)
    flat = out.reshape(-1, 64)
    assert flat[0].isnan().all() and not flat[1:].isnan().any()


@needs_onednn
def test_weight_changed_after_packing_is_not_read_stale():
    linear = _linear(bias=False)
    linear.prepack()
    x = torch.randn(3, 48)
    with torch.no_grad():
        linear.weight.mul_(2)
    torch.testing.assert_close(linear(x), F.linear(x, linear.weight))
    linear.to_w8a8_shell(static=False)
    assert linear.packed is None


@needs_onednn
def test_deepcopy_packs_the_copied_weight():
    linear = _linear()
    linear.prepack()
    clone = copy.deepcopy(linear)
    assert clone.packed is not None and clone.packed.source is clone.weight
    x = torch.randn(2, 48)
    torch.testing.assert_close(clone(x), linear(x))


@needs_onednn
def test_size_bound_packs_only_weights_big_enough_to_gain():
    bound = linear_module.ONEDNN_MIN_WEIGHT_ELEMENTS
    assert pack_weight(torch.randn(bound // 512 - 1, 512)) is None
    assert pack_weight(torch.randn(bound // 512, 512)) is not None
    small = _linear()
    small.prepack()
    assert small.packed is None
    x = torch.randn(3, 48)
    torch.testing.assert_close(small(x), F.linear(x, small.weight, small.bias))


def test_falls_back_where_onednn_cannot_help(monkeypatch):
    assert pack_weight(torch.randn(8, 4, dtype=torch.float64)) is None
    assert pack_weight(torch.randn(8, 4, dtype=torch.float16)) is None
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: False)
    linear = _linear()
    linear.prepack()
    assert linear.packed is None
    x = torch.randn(3, 48)
    torch.testing.assert_close(linear(x), F.linear(x, linear.weight, linear.bias))


@needs_onednn
@pytest.mark.parametrize("tied", [True, False])
def test_loaded_model_packs_every_linear_and_the_lm_head(tied, tmp_path):
    from transformers import LlamaConfig

    from ascendtile.model import load_model
    from model.helpers import save_tiny

    save_tiny(LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                          num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=tied), tmp_path)
    model = load_model(str(tmp_path)).model
    assert all(m.packed is not None for m in model.modules() if isinstance(m, Linear))
    head = model.model.embed_tokens.weight if tied else model.lm_head.weight
    assert (model.tied_head is not None) == tied
    hidden = torch.randn(5, 32)
    torch.testing.assert_close(model.compute_logits(hidden), F.linear(hidden, head))


@needs_onednn
def test_weights_made_in_inference_mode_pack_too():
    with torch.inference_mode():
        linear = _linear()
        linear.prepack()
        x = torch.randn(3, 48)
        assert linear.packed is not None and linear.packed.version is None
        torch.testing.assert_close(linear(x), F.linear(x, linear.weight, linear.bias))


@needs_onednn
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(1, 48), (1, 1, 48), (3, 48), (1, 3, 48), (4, 48), (33, 48)])
@pytest.mark.parametrize("vendor", ["GenuineIntel", "AuthenticAMD"])
def test_few_fp32_rows_take_aten_on_intel_others_the_packed_weight(dtype, shape, vendor, monkeypatch):
    monkeypatch.setattr(linear_module, "cpu_vendor", lambda: vendor)
    linear = _linear(dtype=dtype)
    linear.prepack()
    calls = []
    pointwise = torch.ops.mkldnn._linear_pointwise
    monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise", lambda *a: calls.append(a) or pointwise(*a))
    x = torch.randn(shape, dtype=dtype)
    tol = {} if dtype == torch.float32 else {"rtol": 1.6e-2, "atol": 1e-2}
    torch.testing.assert_close(linear(x), F.linear(x, linear.weight, linear.bias), **tol)
    rows = x.numel() // x.shape[-1]
    # without bf16 dot products a bf16 weight's pack is fp32, which a single bf16 row skips
    one_bf16_row = dtype == torch.bfloat16 and not linear_module.cpu_has_bf16_dot() and rows == 1
    assert len(calls) == (0 if (rows <= 3 and dtype == torch.float32 and vendor == "GenuineIntel") or one_bf16_row
                          else 1)


@needs_onednn
@pytest.mark.parametrize("shape", [(1, 48), (2, 1, 48), (4, 48), (3, 5, 48)])
@pytest.mark.parametrize("vendor", ["GenuineIntel", "AuthenticAMD"])
def test_onednn_linear_op_chooses_as_eager_does(shape, vendor, monkeypatch):
    """torch.ops.ascendtile.onednn_linear, what CPU level 2's decode graph calls: the packed product
    (aten for up to 3 fp32 rows on an Intel CPU), equal to F.linear with the bias, a NaN row kept to
    itself, and a fake impl whose output matches."""
    monkeypatch.setattr(linear_module, "cpu_vendor", lambda: vendor)
    linear = _linear()
    linear.prepack()
    calls, pointwise = [], torch.ops.mkldnn._linear_pointwise
    monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise", lambda *a: calls.append(a) or pointwise(*a))
    x = torch.randn(shape)
    x.view(-1, 48)[0, 5] = float("nan")
    out = torch.ops.ascendtile.onednn_linear(x, linear.weight, linear.packed.packed, linear.bias)
    torch.testing.assert_close(out, F.linear(x, linear.weight, linear.bias), equal_nan=True)
    rows = math.prod(shape[:-1])
    assert len(calls) == (0 if rows <= 3 and vendor == "GenuineIntel" else 1)
    flat = out.reshape(-1, 64)
    assert flat[0].isnan().all() and not flat[1:].isnan().any()
    with torch._subclasses.FakeTensorMode() as mode:
        fake = linear_module._onednn_linear_fake(mode.from_tensor(x), mode.from_tensor(linear.weight), None, None)
    assert fake.shape == out.shape and fake.dtype == out.dtype
