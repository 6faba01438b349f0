"""GGUF 4-bit tensors served as W4A16 (model/loading/gguf_w4a16.py): the Q4_0 / Q4_1 / Q4_K block
decoders against gguf's own dequantizer, bit for bit, on random block bytes (every scale, min and
nibble pattern) and on parts (rows; group-aligned columns, inside a Q4_K super-block too); and a
tiny Llama GGUF of mixed types loaded with quantization="w4a16": which Linears become W4A16 (a
merged q/k/v with a Q8_0 v stays float), their weights bit-identical to the float load's
(un-permuted q/k rows included), the same logits, and tensor-parallel ranks' shards equal to the
float ranks' (rows, group-aligned columns) or refused when a rank's columns split a group."""
import gguf
import numpy as np
import pytest
import torch
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as Q
from transformers import LlamaConfig

from ascendtile.model import load_model
from ascendtile.model.layers.linear import Linear
from ascendtile.model.loading.gguf_reader import GGUFTensor
from ascendtile.model.loading.gguf_w4a16 import decode_int4, read_int4
from ascendtile.ops.reference.w4a16 import dequantize_w4a16
from model.gguf_writer import write_llama_gguf
from model.helpers import PagedDriver, save_tiny

ATOL = 1e-5  # fp32 both sides, the same weights: summation order only
PROMPT = {0: [3, 17, 42, 5, 88, 9, 1, 60, 2]}
# Intermediate 128 and hidden 64: every row-parallel half (64, 32 columns) is whole groups of 32.
CONFIG = LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, initializer_range=0.1, max_position_embeddings=128, rms_norm_eps=1e-5,
                     tie_word_embeddings=False)
# Layer 0's v is Q8_0: its merged q/k/v stays float. Gate and up mix Q4_0 and Q4_1 (both groups of 32).
TYPES = {"attn_q": Q.Q4_0, "attn_k": Q.Q4_1, "blk.0.attn_v": Q.Q8_0, "blk.1.attn_v": Q.Q4_0, "attn_output": Q.Q4_1,
         "ffn_gate": Q.Q4_0, "ffn_up": Q.Q4_1, "ffn_down": Q.Q4_0}


def _random_blocks(kind: Q, rows: int, columns: int, rng: np.random.Generator) -> np.ndarray:
    """Random bytes for every block (nibbles, Q4_K's packed 6-bit scales and mins), with finite
    fp16 d / m / dmin in the first 4 bytes (Q4_0's bytes 2-3 are nibbles either way)."""
    block, block_bytes = GGML_QUANT_SIZES[kind]
    data = rng.integers(0, 256, (rows, columns // block, block_bytes), dtype=np.uint8)
    halves = (rng.standard_normal((rows, columns // block, 2)) * 0.05).astype(np.float16)
    data[..., :4] = halves.view(np.uint8)
    return data.reshape(rows, -1)


def _dequantized(arrays) -> torch.Tensor:
    q, s, m = (torch.from_numpy(np.ascontiguousarray(a)) for a in arrays)
    return dequantize_w4a16(q, s, m, 32)


@pytest.mark.parametrize("kind", [Q.Q4_0, Q.Q4_1, Q.Q4_K])
def test_decoder_is_bit_identical_to_gguf(kind):
    rng = np.random.default_rng(int(kind))
    data = _random_blocks(kind, 5, 768, rng)
    qweight, scales, mins = decode_int4(data, kind)
    assert (qweight.shape, scales.shape, mins.shape) == ((5, 384), (5, 24), (5, 24))
    assert qweight.dtype == np.uint8 and scales.dtype == mins.dtype == np.float32
    assert torch.equal(_dequantized((qweight, scales, mins)), torch.from_numpy(gguf.quants.dequantize(data, kind)))


@pytest.mark.parametrize("kind", [Q.Q4_0, Q.Q4_1])
def test_decoder_on_gguf_quantized_weights(kind):
    w = np.random.default_rng(1).standard_normal((8, 256)).astype(np.float32)
    data = gguf.quants.quantize(w, kind)
    assert torch.equal(_dequantized(decode_int4(data, kind)), torch.from_numpy(gguf.quants.dequantize(data, kind)))


@pytest.mark.parametrize("kind", [Q.Q4_0, Q.Q4_K])
@pytest.mark.parametrize("part", [(0, 2, 3), (1, 32, 64), (1, 256, 512), (1, 480, 288)])
def test_parts_decode_only_their_blocks(kind, part):
    data = _random_blocks(kind, 6, 768, np.random.default_rng(2))
    tensor = GGUFTensor("blk.0.ffn_down.weight", kind, (6, 768), data)
    whole = torch.from_numpy(gguf.quants.dequantize(data, kind))
    assert torch.equal(_dequantized(read_int4(tensor, part)), whole.narrow(*part))


def test_part_splitting_a_group_is_refused():
    tensor = GGUFTensor("blk.0.ffn_down.weight", Q.Q4_1, (2, 128), _random_blocks(Q.Q4_1, 2, 128, np.random.default_rng(3)))
    with pytest.raises(ValueError, match=r"'blk\.0\.ffn_down\.weight': columns \[16, 64\) split a group of 32"):
        read_int4(tensor, (1, 16, 48))
    with pytest.raises(ValueError, match="^kind: Q8_0 is not a 4-bit GGUF type"):
        decode_int4(np.zeros((1, 34), np.uint8), Q.Q8_0)


@pytest.fixture(scope="module")
def mixed_gguf(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gguf_w4a16")
    write_llama_gguf(save_tiny(CONFIG, tmp / "hf"), tmp / "mixed.gguf", types=TYPES)
    return str(tmp / "mixed.gguf")


def _linears(model) -> dict[str, Linear]:
    return {name: m for name, m in model.named_modules() if isinstance(m, Linear)}


def test_only_all_4bit_linears_become_w4a16(mixed_gguf):
    kinds = {name: m.kind for name, m in _linears(load_model(mixed_gguf, quantization="w4a16").model).items()}
    assert kinds.pop("model.layers.0.self_attn.qkv_proj") == "float"  # v is Q8_0
    assert kinds.pop("lm_head") == "float"  # Q8_0, and the LM head stays float anyway
    assert set(kinds.values()) == {"w4a16"}, kinds


def test_weights_bit_identical_and_logits_equal(mixed_gguf):
    float_model = load_model(mixed_gguf).model
    w4a16 = load_model(mixed_gguf, dtype=torch.float32, quantization="w4a16").model
    floats = _linears(float_model)
    for name, linear in _linears(w4a16).items():
        assert torch.equal(linear.dequantized_weight(torch.float32), floats[name].weight), name
    want = PagedDriver(float_model, 1).step(PROMPT)
    torch.testing.assert_close(PagedDriver(w4a16, 1).step(PROMPT), want, rtol=0, atol=ATOL)


def test_default_dtype_is_bf16(mixed_gguf):
    model = load_model(mixed_gguf, quantization="w4a16").model
    assert model.model.embed_tokens.weight.dtype == torch.bfloat16
    assert model.model.layers[1].mlp.down_proj.activation_dtype == torch.bfloat16


@pytest.mark.parametrize("rank", [0, 1])
def test_tensor_parallel_rank_shards_equal_float_shards(mixed_gguf, as_rank, rank):
    as_rank(2, rank)
    floats = _linears(load_model(mixed_gguf).model)
    shard = _linears(load_model(mixed_gguf, dtype=torch.float32, quantization="w4a16").model)
    assert shard["model.layers.1.mlp.down_proj"].in_features == 64  # row-parallel: half the columns
    for name, linear in shard.items():
        assert torch.equal(linear.dequantized_weight(torch.float32), floats[name].weight), name


def test_tensor_parallel_split_inside_a_group_is_refused(mixed_gguf, as_rank):
    as_rank(4, 0)  # o_proj's 64 inputs: 16 per rank, half a group of 32
    with pytest.raises(ValueError, match=r"^group_size: this rank's input columns \[0, 16\) of 64 split a group of 32"):
        load_model(mixed_gguf, quantization="w4a16")
