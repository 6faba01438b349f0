"""Tensor parallelism (ascendtile.distributed, layers/parallel_linear.py, layers/embedding.py):
TP=2 over 2 gloo processes gives the TP=1 logits through the paged cache, within the fp32
tolerance, for tiny random checkpoints of every tensor-parallel architecture: Llama (GQA with KV
heads split, one KV head replicated, untied head with biases), Qwen3 (q/k norm), Mistral
(sliding window), Gemma 3 (one KV head replicated, q/k norms, sliding and full layers, tied head,
soft-capping), vocabularies that do not divide (padded), W8A8 checkpoints (static input
scales: the same logits; dynamic per-token scales are taken over a rank's columns in the
row-parallel layers, so within the W8A8 bound), a W4A16 checkpoint (group-wise 4-bit weights,
rows and whole-group columns per rank: the same logits), and DeepSeek-V2's cases
(test_tensor_parallel_deepseek.py).
All cases share one spawned run. In-process:
each rank's shard of a W8A8 model, online W8A8 per rank, and sizes that cannot be split."""
import json

import pytest
import torch
from transformers import Gemma3TextConfig, LlamaConfig, MistralConfig, Qwen3Config

from ascendtile.model import load_model, quantize_w4a16, quantize_w8a8, save_w4a16, save_w8a8
from ascendtile.model.architectures.base import CausalLM
from model.helpers import PagedDriver, save_tiny
from model.test_tensor_parallel_deepseek import CASES as DEEPSEEK_CASES
from model.tp_worker import STEPS, run_ranks, script_logits
from tolerances import assert_close

SIZES = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
             initializer_range=0.1, max_position_embeddings=256)
GEMMA = dict(SIZES, head_dim=16, sliding_window=4, layer_types=["sliding_attention", "full_attention"],
             query_pre_attn_scalar=24, final_logit_softcapping=3.0)
CASES = {
    "gqa_kv_heads_split": LlamaConfig(**SIZES, num_key_value_heads=2, tie_word_embeddings=True),
    "one_kv_head_replicated": LlamaConfig(**SIZES, num_key_value_heads=1, tie_word_embeddings=True),
    "untied_with_biases": LlamaConfig(**SIZES, num_key_value_heads=2, tie_word_embeddings=False,
                                      attention_bias=True, mlp_bias=True),
    "qwen3_qk_norm": Qwen3Config(**SIZES, num_key_value_heads=2, head_dim=16, tie_word_embeddings=False),
    "mistral_sliding_window": MistralConfig(**SIZES, num_key_value_heads=2, sliding_window=4),
    "gemma3_one_kv_head": Gemma3TextConfig(**GEMMA, num_key_value_heads=1),
    "odd_vocab_tied": LlamaConfig(**{**SIZES, "vocab_size": 127}, num_key_value_heads=2, tie_word_embeddings=True),
    "odd_vocab_untied_gemma3": Gemma3TextConfig(**{**GEMMA, "vocab_size": 127}, num_key_value_heads=2,
                                                tie_word_embeddings=False),
}
W8A8_BASE = "untied_with_biases"
W8A8_CASES = ("w8a8_static", "w8a8_dynamic")
# Intermediate 128: each rank's 64 down_proj columns are whole groups of 32 (96 would split one).
W4A16_CONFIG = LlamaConfig(**{**SIZES, "intermediate_size": 128}, num_key_value_heads=2, tie_word_embeddings=False,
                           attention_bias=True)
REL_BOUND_DYNAMIC = 0.05  # max |Δlogit| / max |logit|, test_w8a8.py's dynamic bound


def _save_w8a8(float_dir, out, activation: str) -> None:
    model = load_model(str(float_dir)).model
    quantize_w8a8(model, activation, calibration=lambda m: PagedDriver(m, 3).step(STEPS[0]))
    save_w8a8(model, out, json.loads((float_dir / "config.json").read_text()))


def test_tp2_logits_equal_tp1(tmp_path):
    directories = {}
    for case, config in {**CASES, **DEEPSEEK_CASES}.items():
        save_tiny(config, tmp_path / case, randomize_norms=True)
        directories[case] = str(tmp_path / case)
    for case in W8A8_CASES:
        _save_w8a8(tmp_path / W8A8_BASE, tmp_path / case, case.removeprefix("w8a8_"))
        directories[case] = str(tmp_path / case)
    save_tiny(W4A16_CONFIG, tmp_path / "w4a16_float", randomize_norms=True)
    raw = json.loads((tmp_path / "w4a16_float" / "config.json").read_text())
    save_w4a16(quantize_w4a16(load_model(str(tmp_path / "w4a16_float")).model, 32), tmp_path / "w4a16", raw)
    directories["w4a16"] = str(tmp_path / "w4a16")
    expected = {case: script_logits(directory) for case, directory in directories.items()}
    ranks = run_ranks(2, directories, tmp_path)
    for case in directories:
        vocab = ({**CASES, **DEEPSEEK_CASES}.get(case) or CASES[W8A8_BASE]).vocab_size  # W4A16's too
        for step, want in enumerate(expected[case]):
            assert want.shape[-1] == vocab
            for rank, got in enumerate(ranks):
                assert got[case][step].shape == want.shape, (case, step, rank)
                if case == "w8a8_dynamic":
                    assert ((got[case][step] - want).abs().max() / want.abs().max()).item() < REL_BOUND_DYNAMIC
                else:
                    assert_close(got[case][step], want)


@pytest.mark.parametrize("rank", [0, 1])
def test_w8a8_checkpoint_shards_with_its_rows(tmp_path, as_rank, rank):
    save_tiny(CASES[W8A8_BASE], tmp_path / "float")
    _save_w8a8(tmp_path / "float", tmp_path / "w8a8", "static")
    whole = load_model(str(tmp_path / "w8a8")).model.model.layers[0]
    as_rank(2, rank)
    layer = load_model(str(tmp_path / "w8a8")).model.model.layers[0]
    q, kv, inter = (slice(n * rank, n * rank + n) for n in (32, 16, 48))
    qkv, gate_up = whole.self_attn.qkv_proj, whole.mlp.gate_up_proj
    rows = {"qkv": torch.cat([torch.arange(64)[q], 64 + torch.arange(32)[kv], 96 + torch.arange(32)[kv]]),
            "gate_up": torch.cat([torch.arange(96)[inter], 96 + torch.arange(96)[inter]])}
    for got, want, kept in ((layer.self_attn.qkv_proj, qkv, rows["qkv"]), (layer.mlp.gate_up_proj, gate_up, rows["gate_up"])):
        assert got.weight.dtype == torch.int8
        assert torch.equal(got.weight, want.weight[kept])  # column-parallel: scales follow the rows
        assert torch.equal(got.weight_scale, want.weight_scale[kept])
        assert torch.equal(got.input_scale, want.input_scale)  # static input scale: whole
    for got, want, cols in ((layer.self_attn.o_proj, whole.self_attn.o_proj, q),
                            (layer.mlp.down_proj, whole.mlp.down_proj, inter)):
        assert torch.equal(got.weight, want.weight[:, cols])  # row-parallel: columns split,
        assert torch.equal(got.weight_scale, want.weight_scale)  # per-output-channel scales whole
        assert torch.equal(got.input_scale, want.input_scale)


def test_online_w8a8_quantizes_each_rank_shard(tmp_path, as_rank):
    save_tiny(CASES[W8A8_BASE], tmp_path)
    as_rank(2, 1)
    down = load_model(str(tmp_path), quantization="w8a8").model.model.layers[0].mlp.down_proj
    as_rank(1, 0)
    full = load_model(str(tmp_path)).model.model.layers[0].mlp.down_proj.weight[:, 48:]
    scale = full.abs().amax(dim=1) / 127  # per output channel over this rank's columns
    assert torch.allclose(down.weight_scale, scale)
    assert torch.equal(down.weight, torch.round(full / scale[:, None]).to(torch.int8))
    with pytest.raises(NotImplementedError, match="save_w8a8: a tensor-parallel rank"):
        as_rank(2, 1)
        save_w8a8(quantize_w8a8(load_model(str(tmp_path)).model), tmp_path / "out", {})


@pytest.mark.parametrize("size, config, field", [
    (2, LlamaConfig(**{**SIZES, "num_attention_heads": 3, "hidden_size": 48}, num_key_value_heads=3),
     "num_attention_heads"),
    (2, LlamaConfig(**{**SIZES, "num_attention_heads": 6, "hidden_size": 48}, num_key_value_heads=3),
     "num_key_value_heads"),
    (4, LlamaConfig(**{**SIZES, "num_attention_heads": 12, "hidden_size": 48}, num_key_value_heads=3),
     "num_key_value_heads"),
    (2, LlamaConfig(**{**SIZES, "intermediate_size": 95}, num_key_value_heads=2), "intermediate_size"),
    (2, Gemma3TextConfig(**{**GEMMA, "num_attention_heads": 3, "hidden_size": 48}, num_key_value_heads=1),
     "num_attention_heads"),
    (4, Gemma3TextConfig(**{**GEMMA, "num_attention_heads": 12, "hidden_size": 48}, num_key_value_heads=3),
     "num_key_value_heads"),
])
def test_unsplittable_sizes_name_the_field(tmp_path, as_rank, size, config, field):
    save_tiny(config, tmp_path)
    as_rank(size, 0)
    with pytest.raises(ValueError, match=rf"^{field}: .*tensor_parallel_size {size}"):
        load_model(str(tmp_path))


def test_architecture_without_tensor_parallel_is_refused(tmp_path, as_rank):
    class Unsharded(CausalLM):
        family = "unsharded"

    save_tiny(CASES["gqa_kv_heads_split"], tmp_path)
    config = load_model(str(tmp_path)).config
    as_rank(2, 0)
    with pytest.raises(NotImplementedError, match="LlamaForCausalLM: tensor parallelism is not implemented"):
        Unsharded(config)
