"""Tensor parallelism (ascendkit.distributed, layers/parallel_linear.py, layers/embedding.py):
TP=2 over 2 gloo processes gives the TP=1 logits, within the fp32 tolerance, for tiny random
Llama checkpoints through the paged cache (GQA with KV heads split, with one KV head replicated,
untied head with biases); each rank builds and loads only its shard; head counts that cannot be
split and architectures or quantizations without TP give errors naming the field."""
import pytest
import torch
from safetensors.torch import load_file
from transformers import LlamaConfig

from ascendkit.distributed import group
from ascendkit.model import load_model
from model.helpers import save_tiny
from model.tp_worker import run_ranks, script_logits
from tolerances import assert_close

SIZES = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
             initializer_range=0.1, max_position_embeddings=256)
CASES = {
    "gqa_kv_heads_split": LlamaConfig(**SIZES, num_key_value_heads=2, tie_word_embeddings=True),
    "one_kv_head_replicated": LlamaConfig(**SIZES, num_key_value_heads=1, tie_word_embeddings=True),
    "untied_with_biases": LlamaConfig(**SIZES, num_key_value_heads=2, tie_word_embeddings=False,
                                      attention_bias=True, mlp_bias=True),
}


@pytest.fixture
def as_rank(monkeypatch):
    """Pretend this process is `rank` of a group of `size` (no process group: building and
    loading a model runs no collective)."""
    def set_rank(size: int, rank: int) -> None:
        monkeypatch.setattr(group._GROUP, "size", size)
        monkeypatch.setattr(group._GROUP, "rank", rank)
    return set_rank


def test_tp2_logits_equal_tp1(tmp_path):
    directories = {}
    for case, config in CASES.items():
        save_tiny(config, tmp_path / case, randomize_norms=True)
        directories[case] = str(tmp_path / case)
    expected = {case: script_logits(directory) for case, directory in directories.items()}
    ranks = run_ranks(2, directories, tmp_path)
    for case in CASES:
        for step, want in enumerate(expected[case]):
            for rank, got in enumerate(ranks):
                assert got[case][step].shape == want.shape, (case, step, rank)
                assert_close(got[case][step], want)


@pytest.mark.parametrize("rank", [0, 1])
def test_rank_loads_only_its_shard(tmp_path, as_rank, rank):
    save_tiny(CASES["untied_with_biases"], tmp_path)
    full = load_file(tmp_path / "model.safetensors")
    as_rank(2, rank)
    model = load_model(str(tmp_path)).model
    layer = model.model.layers[1]
    q, kv, inter, vocab = slice(32 * rank, 32 * rank + 32), slice(16 * rank, 16 * rank + 16), \
        slice(48 * rank, 48 * rank + 48), slice(64 * rank, 64 * rank + 64)
    prefix = "model.layers.1."
    torch.testing.assert_close(layer.self_attn.qkv_proj.weight, torch.cat(
        [full[prefix + f"self_attn.{n}_proj.weight"][r] for n, r in (("q", q), ("k", kv), ("v", kv))]), rtol=0, atol=0)
    torch.testing.assert_close(layer.self_attn.o_proj.weight, full[prefix + "self_attn.o_proj.weight"][:, q])
    torch.testing.assert_close(layer.self_attn.o_proj.bias, full[prefix + "self_attn.o_proj.bias"])
    torch.testing.assert_close(layer.mlp.gate_up_proj.bias, torch.cat(
        [full[prefix + "mlp.gate_proj.bias"][inter], full[prefix + "mlp.up_proj.bias"][inter]]))
    torch.testing.assert_close(layer.mlp.down_proj.weight, full[prefix + "mlp.down_proj.weight"][:, inter])
    torch.testing.assert_close(model.model.embed_tokens.weight, full["model.embed_tokens.weight"][vocab])
    torch.testing.assert_close(model.lm_head.weight, full["lm_head.weight"][vocab])
    model.allocate_kv_cache(3, 16, torch.float32, "cpu")  # the rank's cache holds its KV head only
    assert layer.self_attn.key_cache.shape == (3, 16, 1, 16)


def test_kv_heads_replicated_when_fewer_than_ranks(tmp_path, as_rank):
    save_tiny(CASES["gqa_kv_heads_split"], tmp_path)  # 4 query heads, 2 KV heads
    k = load_file(tmp_path / "model.safetensors")["model.layers.0.self_attn.k_proj.weight"]
    for rank in range(4):  # ranks 0, 1 attend with KV head 0; ranks 2, 3 with KV head 1
        as_rank(4, rank)
        attn = load_model(str(tmp_path)).model.model.layers[0].self_attn
        assert (attn.num_heads, attn.num_kv_heads) == (1, 1)
        torch.testing.assert_close(attn.qkv_proj.weight[16:32], k[16 * (rank // 2): 16 * (rank // 2) + 16])


@pytest.mark.parametrize("size, fields, field", [
    (2, dict(num_attention_heads=3, num_key_value_heads=3, hidden_size=48), "num_attention_heads"),
    (2, dict(num_attention_heads=6, num_key_value_heads=3, hidden_size=48), "num_key_value_heads"),
    (4, dict(num_attention_heads=12, num_key_value_heads=3, hidden_size=48), "num_key_value_heads"),
    (2, dict(intermediate_size=95), "intermediate_size"),
    (2, dict(vocab_size=127), "vocab_size"),
])
def test_unsplittable_sizes_name_the_field(tmp_path, as_rank, size, fields, field):
    save_tiny(LlamaConfig(**{**SIZES, "num_key_value_heads": 2, **fields}), tmp_path)
    as_rank(size, 0)
    with pytest.raises(ValueError, match=rf"^{field}: .*tensor_parallel_size {size}"):
        load_model(str(tmp_path))


def test_unsupported_combinations_are_refused(tmp_path, as_rank):
    from transformers import Gemma3TextConfig

    save_tiny(Gemma3TextConfig(**SIZES, num_key_value_heads=2, head_dim=16), tmp_path / "gemma")
    save_tiny(CASES["gqa_kv_heads_split"], tmp_path / "llama")
    as_rank(2, 0)
    with pytest.raises(NotImplementedError, match="Gemma3ForCausalLM: tensor parallelism is not implemented"):
        load_model(str(tmp_path / "gemma"))
    with pytest.raises(NotImplementedError, match="quantization='w8a8'"):
        load_model(str(tmp_path / "llama"), quantization="w8a8")
