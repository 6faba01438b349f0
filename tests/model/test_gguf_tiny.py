"""A tiny Llama written to GGUF here (Q/K rows permuted the way llama.cpp's converter does, Q8_0
and F32 tensors, untied head) loads to the same logits as HF's own GGUF loading, and round-trips
its config and tokenizer metadata."""
import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig

from ascendkit.model import load_model
from model.helpers import PagedDriver, hf_logits, save_tiny

ATOL = 1e-4
HEADS, KV_HEADS, HIDDEN = 4, 2, 64
NAMES = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
         "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
         "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}


def _llama_cpp_permute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp convert_hf_to_gguf: per head, rows [first half | second half] -> interleaved pairs."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _write_gguf(hf_model, path, vocab: int, merges=("a b",), rope_freqs: bool = False) -> None:
    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(2)
    writer.add_context_length(128)
    writer.add_embedding_length(HIDDEN)
    writer.add_feed_forward_length(96)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(vocab)
    tokens = ["a", "b", "ab"] + [f"c{i}" for i in range(vocab - 5)] + ["<s>", "</s>"]
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types([1] * (vocab - 2) + [3, 3])
    writer.add_token_merges(list(merges))
    writer.add_bos_token_id(vocab - 2)
    writer.add_eos_token_id(vocab - 1)
    writer.add_chat_template("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    if rope_freqs:  # Llama 3.1-style per-frequency rope factors, one per rotated pair
        writer.add_tensor("rope_freqs.weight", np.ones(HIDDEN // HEADS // 2, dtype=np.float32))
    for name, tensor in hf_model.state_dict().items():
        w = tensor.float().numpy()
        if name == "model.embed_tokens.weight":
            target = "token_embd.weight"
        elif name == "model.norm.weight":
            target = "output_norm.weight"
        elif name == "lm_head.weight":
            target = "output.weight"
        else:
            _, _, layer, *rest = name.split(".")
            module, param = ".".join(rest[:-1]), rest[-1]
            target = f"blk.{layer}.{NAMES[module]}.{param}"
            if module == "self_attn.q_proj":
                w = _llama_cpp_permute(w, HEADS)
            elif module == "self_attn.k_proj":
                w = _llama_cpp_permute(w, KV_HEADS)
        if w.ndim == 2:
            writer.add_tensor(target, gguf.quants.quantize(w, gguf.GGMLQuantizationType.Q8_0),
                              raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            writer.add_tensor(target, w)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gguf")
    cfg = LlamaConfig(vocab_size=96, hidden_size=HIDDEN, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, initializer_range=0.1,
                      max_position_embeddings=128, rms_norm_eps=1e-5, tie_word_embeddings=False)
    hf_model = save_tiny(cfg, tmp / "hf")
    _write_gguf(hf_model, tmp / "tiny.gguf", 96)
    _write_gguf(hf_model, tmp / "bad_merges.gguf", 96, merges=("a zz",))
    _write_gguf(hf_model, tmp / "rope_freqs.gguf", 96, rope_freqs=True)
    hf = AutoModelForCausalLM.from_pretrained(str(tmp), gguf_file="tiny.gguf", dtype=torch.float32).eval()
    return tmp / "tiny.gguf", hf


def test_logits_match_hf_gguf_loading(tiny_gguf):
    path, hf = tiny_gguf
    loaded = load_model(str(path))
    assert loaded.model.lm_head is not None  # output.weight present: untied
    ids = [3, 17, 42, 5, 88, 9, 1]
    logits = PagedDriver(loaded.model, 1).step({0: ids})
    assert (logits - hf_logits(hf, ids)).abs().max().item() < ATOL


def test_config_and_tokenizer_metadata(tiny_gguf):
    path, _ = tiny_gguf
    loaded = load_model(str(path))
    c = loaded.config
    assert (c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.num_key_value_heads, c.head_dim,
            c.vocab_size, c.max_position_embeddings, c.tie_word_embeddings) == (2, 64, 4, 2, 16, 96, 128, False)
    tok = loaded.tokenizer
    assert tok.bos_token_id == 94 and tok.eos_token_ids == {95}
    assert tok.apply_chat_template([{"role": "user", "content": "hi"}]) == "hi"
    assert tok.encode("abba") == [2, 1, 0] and tok.decode([2, 1, 0, 95]) == "abba"


def test_inconsistent_tokenizer_metadata_names_the_file(tiny_gguf):
    path, _ = tiny_gguf
    with pytest.raises(ValueError, match=r"bad_merges\.gguf: tokenizer metadata is inconsistent"):
        load_model(str(path.parent / "bad_merges.gguf"))


def test_rope_freqs_tensor_is_refused(tiny_gguf):
    path, _ = tiny_gguf
    with pytest.raises(ValueError, match=r"rope_freqs\.gguf: tensor 'rope_freqs\.weight' \(per-frequency rope factors\) "
                       "is not supported"):
        load_model(str(path.parent / "rope_freqs.gguf"))


def test_rope_scaling_metadata():
    from ascendkit.model.loading.gguf_loader import _rope_scaling

    meta = {"llama.rope.scaling.type": "yarn", "llama.rope.scaling.factor": 4.0,
            "llama.rope.scaling.original_context_length": 4096}
    assert _rope_scaling(meta, "llama.") == {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}
    assert _rope_scaling({"llama.rope.scaling.type": "none"}, "llama.") is None
