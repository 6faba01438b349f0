"""Loader errors name the file and the tensor: unknown architecture, missing weight, shape
mismatch, corrupt GGUF; plus sharded checkpoints with an index and the default-model lookup."""
import json
import os

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig

from ascendtile.model import default_model_path, load_model
from model.helpers import PagedDriver, save_tiny


def _tiny(tmp_path):
    cfg = LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=False)
    save_tiny(cfg, tmp_path)
    return tmp_path / "model.safetensors"


def test_unknown_architecture(tmp_path):
    _tiny(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["architectures"] = ["FalconForCausalLM"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"config\.json: unknown architecture 'FalconForCausalLM'"):
        load_model(str(tmp_path))


def test_missing_weight(tmp_path):
    weights = _tiny(tmp_path)
    tensors = load_file(weights)
    del tensors["model.layers.0.self_attn.k_proj.weight"]
    save_file(tensors, weights)
    with pytest.raises(ValueError, match=r"missing weight\(s\) model\.layers\.0\.self_attn\.k_proj\.weight") as err:
        load_model(str(tmp_path))
    assert str(tmp_path) in str(err.value)


def test_shape_mismatch(tmp_path):
    weights = _tiny(tmp_path)
    tensors = load_file(weights)
    tensors["model.layers.0.mlp.up_proj.weight"] = torch.zeros(47, 32)
    save_file(tensors, weights)
    with pytest.raises(ValueError, match=r"model\.safetensors: tensor 'model\.layers\.0\.mlp\.up_proj\.weight' has shape \(47, 32\), expected \(48, 32\)"):
        load_model(str(tmp_path))


def test_unexpected_tensor(tmp_path):
    weights = _tiny(tmp_path)
    tensors = load_file(weights)
    tensors["model.layers.0.self_attn.extra.weight"] = torch.zeros(2)
    save_file(tensors, weights)
    with pytest.raises(ValueError, match=r"model\.safetensors: unexpected tensor 'model\.layers\.0\.self_attn\.extra\.weight'"):
        load_model(str(tmp_path))


def test_corrupt_gguf(tmp_path):
    with open(default_model_path(), "rb") as f:
        head = f.read(4_000_000)
    bad_magic, truncated = tmp_path / "bad.gguf", tmp_path / "truncated.gguf"
    bad_magic.write_bytes(b"NOPE" + head[4:1000])
    truncated.write_bytes(head)
    with pytest.raises(ValueError, match=r"bad\.gguf: not a valid GGUF file.*magic"):
        load_model(str(bad_magic))
    with pytest.raises(ValueError, match=r"truncated\.gguf: not a valid GGUF file"):
        load_model(str(truncated))


def test_not_a_model(tmp_path):
    with pytest.raises(FileNotFoundError, match="^model: "):
        load_model(str(tmp_path / "nothing.bin"))
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_model(str(tmp_path))
    with pytest.raises(ValueError, match="^quantization"):
        load_model(str(tmp_path), quantization="int4")


def test_sharded_checkpoint_with_index(tmp_path):
    weights = _tiny(tmp_path)
    tensors = load_file(weights)
    names = sorted(tensors)
    os.remove(weights)
    halves = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for file, keys in halves.items():
        save_file({k: tensors[k] for k in keys}, tmp_path / file)
    index = {"weight_map": {k: f for f, keys in halves.items() for k in keys}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    model = load_model(str(tmp_path)).model
    assert torch.equal(model.model.layers[0].mlp.gate_up_proj.weight[:48], tensors["model.layers.0.mlp.gate_proj.weight"])
    logits = PagedDriver(model, 1).step({0: [1, 2, 3]})
    assert logits.shape == (3, 96) and torch.isfinite(logits).all()


def test_default_model_is_found():
    path = default_model_path()
    assert path.endswith("SmolLM2-135M-Instruct.Q4_1.gguf") and os.path.isfile(path)


def test_embedded_models_are_found_by_name():
    from ascendtile.model import EMBEDDED_MODELS, embedded_model_path

    assert embedded_model_path("smollm2-135m-instruct") == default_model_path()
    gemma = embedded_model_path("gemma3-270m")  # assembled from the chunk packages, sha256 checked
    assert gemma.endswith("gemma-3-270m-q4_k_m.gguf") and os.path.getsize(gemma) == 253_113_024
    assert sorted(EMBEDDED_MODELS) == ["default", "gemma3-270m", "smollm2-135m-instruct"]
    with pytest.raises(ValueError, match="^model: 'gemma-9000' is not an embedded model"):
        embedded_model_path("gemma-9000")
    with pytest.raises(FileNotFoundError, match="^model: 'gemma-9000' is not an embedded model name"):
        load_model("gemma-9000")
