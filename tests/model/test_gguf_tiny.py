"""A tiny Llama written to GGUF here (Q/K rows permuted the way llama.cpp's converter does, Q8_0
and F32 tensors, untied head) loads to the same logits as HF's own GGUF loading, and round-trips
its config and tokenizer metadata."""
import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig

from ascendtile.model import load_model
from model.gguf_writer import write_llama_gguf
from model.helpers import PagedDriver, hf_logits, save_tiny

ATOL = 1e-4
HEADS, KV_HEADS, HIDDEN = 4, 2, 64


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gguf")
    cfg = LlamaConfig(vocab_size=96, hidden_size=HIDDEN, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, initializer_range=0.1,
                      max_position_embeddings=128, rms_norm_eps=1e-5, tie_word_embeddings=False)
    hf_model = save_tiny(cfg, tmp / "hf")
    write_llama_gguf(hf_model, tmp / "tiny.gguf")
    write_llama_gguf(hf_model, tmp / "bad_merges.gguf", merges=("a zz",))
    write_llama_gguf(hf_model, tmp / "rope_freqs.gguf", rope_freqs=True)
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
    from ascendtile.model.loading.gguf_loader import _rope_scaling

    meta = {"llama.rope.scaling.type": "yarn", "llama.rope.scaling.factor": 4.0,
            "llama.rope.scaling.original_context_length": 4096}
    assert _rope_scaling(meta, "llama.") == {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}
    assert _rope_scaling({"llama.rope.scaling.type": "none"}, "llama.") is None
