"""W4A16 from float weights (quantize_w4a16, round-to-nearest per group) and compressed-tensors
pack-quantized checkpoints (save_w4a16 / load_model): the RTN rule against an independent
formula, the written tensors decoded here independently by compressed-tensors' own rules (int32
words, q − 8 signed values, zero points packed along rows, w = (q − z)·scale), reloads bit-identical
(symmetric and asymmetric; groups 32, 64, 128 and per channel; fp32 and bf16 scales), tensor-
parallel ranks reading their parts of a checkpoint, and bad inputs named."""
import json

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig

import ascendtile
from ascendtile.model import load_model, quantize_w4a16, save_w4a16
from ascendtile.model.layers.linear import Linear
from ascendtile.model.loading.w4a16 import quantize_weight
from model.helpers import PagedDriver, save_tiny

PROMPT = {0: [3, 17, 42, 5, 88, 9, 1], 1: [60, 2, 11]}
# Inputs 128 (hidden) and 256 (intermediate): groups of 32, 64 and 128 divide both.
CONFIG = LlamaConfig(vocab_size=96, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, initializer_range=0.1, max_position_embeddings=64, attention_bias=True,
                     tie_word_embeddings=False)


@pytest.fixture(scope="module")
def float_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("float")
    save_tiny(CONFIG, path)
    return path


def _raw(float_dir) -> dict:
    return json.loads((float_dir / "config.json").read_text())


def _w4a16_linears(model) -> dict[str, Linear]:
    return {name: m for name, m in model.named_modules() if isinstance(m, Linear) and m.kind == "w4a16"}


def _channel(model):
    """Every Linear but lm_head quantized with one group per row (compressed-tensors' "channel")."""
    for name, linear in list(model.named_modules()):
        if isinstance(linear, Linear) and name != "lm_head":
            quantize_w4a16(linear, linear.in_features, symmetric=True)
    return model


def _decode_independently(tensors: dict, layer: str, group: int | None, symmetric: bool) -> torch.Tensor:
    """float64 [N, K] of one written layer by compressed-tensors' rules, with no code of ours."""
    words = tensors[f"{layer}.weight_packed"].long() & 0xFFFFFFFF
    n, k = tensors[f"{layer}.weight_shape"].tolist()
    q = torch.stack([(words >> (4 * i)) & 15 for i in range(8)], dim=-1).reshape(n, k) - 8  # signed values
    scale = tensors[f"{layer}.weight_scale"].double()
    if symmetric:
        zero = torch.zeros_like(scale)
    else:
        zwords = tensors[f"{layer}.weight_zero_point"].long() & 0xFFFFFFFF
        zero = torch.stack([(zwords >> (4 * i)) & 15 for i in range(8)], dim=1).reshape(-1, scale.shape[1])[:n] - 8
    group = group or k
    return (q.double() - zero.double().repeat_interleave(group, 1)) * scale.repeat_interleave(group, 1)


@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_rtn_rule(symmetric, dtype):
    w = torch.randn(6, 128)
    w[0, :32] = 0  # an all-zero group
    w[1, :64] = w[1, :64].abs() + 0.5  # groups of one sign: asymmetric widens them to hold 0
    qweight, scales, mins = quantize_weight(w, 32, symmetric, dtype)
    groups = w.float().reshape(6, 4, 32)
    if symmetric:
        scale = groups.abs().amax(-1) / 7.5
    else:
        scale = (groups.amax(-1).clamp(min=0) - groups.amin(-1).clamp(max=0)) / 15
    scale = scale.to(dtype).float()
    scale[scale == 0] = 1
    assert torch.equal(scales, scale)
    zero = -mins / scales
    assert torch.equal(zero, zero.round()) and zero.min() >= 0 and zero.max() <= 15  # −z·scale exact
    if symmetric:
        assert torch.equal(zero, torch.full_like(zero, 8.0))
    q = torch.stack([qweight & 15, qweight >> 4], -1).reshape(6, 4, 32).float()
    want = (torch.round(groups / scale[..., None]) + zero[..., None]).clamp(0, 15)
    assert torch.equal(q, want)
    # round to nearest: within half a step but at a group's ends, clipped at most one step off (a
    # symmetric max sits at 7.5 steps of 7; the rounded scale and zero point shift the grid)
    steps = (q * scales[..., None] + mins[..., None] - groups).abs() / scale[..., None]
    assert steps.max() <= 1 + 1e-5 and (steps <= 0.5 + 1e-5).float().mean() > 0.97
    with pytest.raises(ValueError, match="^scale_dtype: must be torch.float16 or torch.bfloat16"):
        quantize_weight(w, 32, symmetric, torch.float32)


@pytest.mark.parametrize("group,symmetric,dtype", [
    (32, False, torch.float32), (64, True, torch.float32), (128, False, torch.float32), (128, True, torch.float32),
    (64, False, torch.bfloat16), (None, True, torch.float32),
])
def test_checkpoint_round_trip(float_dir, tmp_path, group, symmetric, dtype):
    model = load_model(str(float_dir), dtype=dtype).model
    if group is None:
        _channel(model)
    else:
        quantize_w4a16(model, group, symmetric=symmetric)
    save_w4a16(model, tmp_path, _raw(float_dir))
    q = json.loads((tmp_path / "config.json").read_text())["quantization_config"]
    weights = q["config_groups"]["group_0"]["weights"]
    assert (q["quant_method"], q["format"], q["ignore"]) == ("compressed-tensors", "pack-quantized", ["lm_head"])
    assert (weights["num_bits"], weights["type"], weights["symmetric"], weights["group_size"], weights["strategy"]) == (
        4, "int", symmetric, group, "group" if group else "channel")
    tensors = load_file(tmp_path / "model.safetensors")
    layer = "model.layers.1.self_attn.k_proj"
    assert tensors[f"{layer}.weight_packed"].dtype == torch.int32 and tensors[f"{layer}.weight_packed"].shape == (64, 16)
    assert tensors[f"{layer}.weight_scale"].dtype == dtype and tensors[f"{layer}.weight_shape"].tolist() == [64, 128]
    assert (f"{layer}.weight_zero_point" in tensors) == (not symmetric)
    assert tensors["lm_head.weight"].dtype == dtype and "model.layers.0.self_attn.qkv_proj.qweight" not in tensors
    qkv = model.model.layers[1].self_attn.qkv_proj.dequantized_weight(torch.float32)
    assert torch.equal(_decode_independently(tensors, layer, group, symmetric).float(), qkv[128:192])
    reloaded = load_model(str(tmp_path), dtype=dtype).model
    before, after = _w4a16_linears(model), _w4a16_linears(reloaded)
    assert sorted(before) == sorted(after) and len(after) == 8
    for name, linear in after.items():
        for param in ("qweight", "scales", "mins"):
            assert torch.equal(getattr(linear, param), getattr(before[name], param)), (name, param)
        assert (linear.bias is None) == (before[name].bias is None) and (linear.bias is None or torch.equal(
            linear.bias, before[name].bias))
    assert torch.equal(PagedDriver(reloaded, 2, dtype=dtype).step(PROMPT), PagedDriver(model, 2, dtype=dtype).step(PROMPT))


def test_float_checkpoint_quantized_on_load(float_dir):
    loaded = load_model(str(float_dir), quantization="w4a16")
    linears = _w4a16_linears(loaded.model)
    assert len(linears) == 8 and loaded.model.lm_head.kind == "float"
    assert {m.group_size for m in linears.values()} == {128}  # divides 128 and 256
    assert loaded.model.model.embed_tokens.weight.dtype == torch.bfloat16  # W4A16's default activations
    assert any((m.mins != -8 * m.scales).any() for m in linears.values())  # asymmetric


@pytest.mark.parametrize("rank", [0, 1])
def test_tensor_parallel_rank_reads_its_part(float_dir, tmp_path, as_rank, rank):
    save_w4a16(quantize_w4a16(load_model(str(float_dir)).model, 64), tmp_path, _raw(float_dir))
    whole = load_model(str(tmp_path)).model.model.layers[0]
    as_rank(2, rank)
    layer = load_model(str(tmp_path)).model.model.layers[0]
    q, kv, inter = (slice(n * rank, n * rank + n) for n in (64, 32, 128))
    qkv_rows = torch.cat([torch.arange(128)[q], 128 + torch.arange(64)[kv], 192 + torch.arange(64)[kv]])
    gate_up_rows = torch.cat([torch.arange(256)[inter], 256 + torch.arange(256)[inter]])
    for got, want, rows in ((layer.self_attn.qkv_proj, whole.self_attn.qkv_proj, qkv_rows),
                            (layer.mlp.gate_up_proj, whole.mlp.gate_up_proj, gate_up_rows)):
        for param in ("qweight", "scales", "mins"):  # column-parallel: rows of each
            assert torch.equal(getattr(got, param), getattr(want, param)[rows])
    for got, want, cols in ((layer.self_attn.o_proj, whole.self_attn.o_proj, q),
                            (layer.mlp.down_proj, whole.mlp.down_proj, inter)):
        groups = slice(cols.start // 64, cols.stop // 64)
        assert torch.equal(got.qweight, want.qweight[:, cols.start // 2: cols.stop // 2])  # row-parallel: columns
        assert torch.equal(got.scales, want.scales[:, groups]) and torch.equal(got.mins, want.mins[:, groups])


def test_bad_arguments_are_named(float_dir, tmp_path):
    model = load_model(str(float_dir)).model
    with pytest.raises(ValueError, match="^group_size: must be a positive multiple of 32, got 48"):
        quantize_w4a16(model, 48)
    with pytest.raises(ValueError, match=r"^group_size: 256 does not divide the 128 inputs of model\.layers\.0\.self_attn\.qkv_proj"):
        quantize_w4a16(model, 256)
    with pytest.raises(TypeError, match="^symmetric: must be a bool"):
        quantize_w4a16(model, 32, symmetric="yes")
    assert all(m.kind == "float" for m in model.modules() if isinstance(m, Linear))  # nothing converted
    with pytest.raises(ValueError, match=r"^quantization: must be None or one of \['w8a8', 'w4a16'\], got 'int4'"):
        load_model(str(float_dir), quantization="int4")
    with pytest.raises(ValueError, match="^quantization: must be None or one of"):
        ascendtile.LLM(str(float_dir), quantization="w4")
    with pytest.raises(ValueError, match="^model: no W4A16 Linear to save"):
        save_w4a16(model, tmp_path, _raw(float_dir))
    quantize_w4a16(model, 32)
    model.model.layers[0].mlp.down_proj.mins.data[0, 0] += 1e-3  # a free min, as GGUF Q4_1 has
    with pytest.raises(ValueError, match=r"^model: model\.layers\.0\.mlp\.down_proj's mins are not −z·scale"):
        save_w4a16(model, tmp_path, _raw(float_dir))


def _rewrite(directory, config_change=None, tensor_change=None) -> None:
    if config_change:
        config = json.loads((directory / "config.json").read_text())
        config_change(config["quantization_config"])
        (directory / "config.json").write_text(json.dumps(config))
    if tensor_change:
        tensors = load_file(directory / "model.safetensors")
        tensor_change(tensors)
        save_file(tensors, str(directory / "model.safetensors"))


@pytest.mark.parametrize("change,message", [
    (lambda q: q["config_groups"]["group_0"]["weights"].update(num_bits=8),
     r"quantization_config\.config_groups\.\*\.weights\.num_bits: must be 4 for W4A16, got 8"),
    (lambda q: q["config_groups"]["group_0"]["weights"].update(strategy="tensor"),
     r"quantization_config\.config_groups\.\*\.weights\.strategy: must be 'group'"),
    (lambda q: q["config_groups"]["group_0"].update(input_activations={"num_bits": 8}),
     r"quantization_config\.config_groups\.\*\.input_activations: W4A16 quantizes weights only"),
    (lambda q: q["config_groups"].update(group_1={}), r"quantization_config\.config_groups: one group is supported, got 2"),
])
def test_unsupported_schemes_name_the_field(float_dir, tmp_path, change, message):
    save_w4a16(quantize_w4a16(load_model(str(float_dir)).model, 64), tmp_path, _raw(float_dir))
    _rewrite(tmp_path, config_change=change)
    with pytest.raises(ValueError, match=message):
        load_model(str(tmp_path))


def test_inconsistent_tensors_name_the_file(float_dir, tmp_path):
    save_w4a16(quantize_w4a16(load_model(str(float_dir)).model, 64), tmp_path, _raw(float_dir))
    _rewrite(tmp_path, tensor_change=lambda t: t.update({"model.layers.0.mlp.up_proj.weight_shape": torch.tensor([256, 64])}))
    with pytest.raises(ValueError, match=r"model\.safetensors: tensor 'model\.layers\.0\.mlp\.up_proj\.weight_shape' is "
                       r"\[256, 64\], its weight_packed holds \[256, 128\]"):
        load_model(str(tmp_path))
