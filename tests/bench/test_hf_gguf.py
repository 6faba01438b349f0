"""HF transformers' GGUF loading with its metadata parsed once (ascendtile.bench.hf_gguf): one
`gguf.GGUFReader` for the config, the weights and the tokenizer, where transformers alone builds
one for each; the model it gives is the one transformers gives."""
import gguf
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig

from ascendtile.bench.hf_gguf import gguf_parsed_once, hf_from_gguf
from model.gguf_writer import write_llama_gguf
from model.helpers import hf_logits, save_tiny


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gguf")
    cfg = LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=1, num_attention_heads=4,
                      num_key_value_heads=2, initializer_range=0.1, max_position_embeddings=64, tie_word_embeddings=False)
    write_llama_gguf(save_tiny(cfg, tmp / "hf"), tmp / "tiny.gguf")
    return tmp / "tiny.gguf"


@pytest.fixture
def parses(monkeypatch):
    """Every GGUFReader built, as (path, mode)."""
    built, original = [], gguf.GGUFReader

    def counting(path, mode="r"):
        built.append((str(path), mode))
        return original(path, mode)

    monkeypatch.setattr(gguf, "GGUFReader", counting)
    return built


def test_one_parse_for_model_and_tokenizer(tiny_gguf, parses):
    direct = AutoModelForCausalLM.from_pretrained(tiny_gguf.parent, gguf_file=tiny_gguf.name, dtype=torch.float32).eval()
    direct_tok = AutoTokenizer.from_pretrained(tiny_gguf.parent, gguf_file=tiny_gguf.name)
    assert len(parses) == 3  # transformers alone: config, weights, tokenizer
    parses.clear()
    model, tok = hf_from_gguf(tiny_gguf)
    assert parses == [(str(tiny_gguf), "r")]
    assert not model.training and next(model.parameters()).dtype == torch.float32
    ids = [3, 17, 42, 5, 88]
    assert torch.equal(hf_logits(model, ids), hf_logits(direct, ids))
    assert tok.get_vocab() == direct_tok.get_vocab()
    assert hf_from_gguf(tiny_gguf, tokenizer=False)[1] is None
    assert gguf.GGUFReader.__name__ == "counting"  # the block put the reader class back


def test_a_rewritten_file_is_parsed_again(tiny_gguf, parses, tmp_path):
    copy = tmp_path / "copy.gguf"
    copy.write_bytes(tiny_gguf.read_bytes())
    with gguf_parsed_once():
        first = gguf.GGUFReader(copy)
        assert gguf.GGUFReader(copy) is first
        copy.write_bytes(tiny_gguf.read_bytes() + b"\0" * 32)  # another size: another file to the cache
        assert gguf.GGUFReader(copy) is not first
    assert len(parses) == 2
