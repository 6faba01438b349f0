"""HF transformers' GGUF loading with its metadata parsed once (ascendtile.bench.hf_gguf): one
`gguf.GGUFReader` for the config, the weights and the tokenizer, where transformers alone builds
one for each, and one `TensorNameMap` for the weight names, where transformers alone builds one per
module; the model it gives is the one transformers gives."""
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
    """Every GGUFReader built (hf_gguf's own reader class included), as (path, mode)."""
    built, original = [], gguf.GGUFReader.__init__

    def counting(self, path, mode="r"):
        built.append((str(path), mode))
        original(self, path, mode)

    monkeypatch.setattr(gguf.GGUFReader, "__init__", counting)
    return built


@pytest.fixture
def name_maps(monkeypatch):
    """Every gguf TensorNameMap built, as (arch, n_blocks)."""
    built, original = [], gguf.get_tensor_name_map

    def counting(arch, n_blocks):
        built.append((arch, n_blocks))
        return original(arch, n_blocks)

    monkeypatch.setattr(gguf, "get_tensor_name_map", counting)
    return built


def test_one_parse_and_one_name_map_for_model_and_tokenizer(tiny_gguf, parses, name_maps):
    direct = AutoModelForCausalLM.from_pretrained(tiny_gguf.parent, gguf_file=tiny_gguf.name, dtype=torch.float32).eval()
    direct_tok = AutoTokenizer.from_pretrained(tiny_gguf.parent, gguf_file=tiny_gguf.name)
    assert len(parses) == 3  # transformers alone: config, weights, tokenizer
    assert len(name_maps) > 10 and len(set(name_maps)) == 1  # one per module visited, all alike
    parses.clear()
    name_maps.clear()
    model, tok = hf_from_gguf(tiny_gguf)
    assert parses == [(str(tiny_gguf), "r")]
    assert len(name_maps) == 1
    assert not model.training and next(model.parameters()).dtype == torch.float32
    ids = [3, 17, 42, 5, 88]
    assert torch.equal(hf_logits(model, ids), hf_logits(direct, ids))
    assert tok.get_vocab() == direct_tok.get_vocab()
    assert hf_from_gguf(tiny_gguf, tokenizer=False)[1] is None
    # the blocks put the reader class and the map builder back
    assert gguf.GGUFReader is gguf.gguf_reader.GGUFReader and gguf.get_tensor_name_map.__name__ == "counting"


def test_the_shared_reader_reads_what_gguf_reads(tiny_gguf):
    """The shared reader slices a plain ndarray view of the file, not the np.memmap itself; every
    field and tensor it parses is the stock reader's, byte for byte."""
    import numpy as np

    stock = gguf.GGUFReader(tiny_gguf)
    with gguf_parsed_once():
        shared = gguf.GGUFReader(tiny_gguf)
    assert type(stock.data) is np.memmap and type(shared.data) is np.ndarray
    assert list(shared.fields) == list(stock.fields)
    for name, field in stock.fields.items():
        other = shared.fields[name]
        assert (other.offset, other.types, other.data) == (field.offset, field.types, field.data), name
        assert [p.tobytes() for p in other.parts] == [p.tobytes() for p in field.parts], name
    assert [(t.name, t.tensor_type, t.shape.tolist(), t.data.tobytes()) for t in shared.tensors] == \
        [(t.name, t.tensor_type, t.shape.tolist(), t.data.tobytes()) for t in stock.tensors]


def test_a_rewritten_file_is_parsed_again(tiny_gguf, parses, tmp_path):
    copy = tmp_path / "copy.gguf"
    copy.write_bytes(tiny_gguf.read_bytes())
    with gguf_parsed_once():
        first = gguf.GGUFReader(copy)
        assert gguf.GGUFReader(copy) is first
        copy.write_bytes(tiny_gguf.read_bytes() + b"\0" * 32)  # another size: another file to the cache
        assert gguf.GGUFReader(copy) is not first
    assert len(parses) == 2
