"""Tensor-parallel loading reads only a rank's part of each checkpoint tensor: from safetensors
(through `get_slice`) and from GGUF (the rank's rows, or block-aligned column ranges, of the
quantized data before dequantizing). A rank's parameters equal the TP=1 model's narrowed to its
share, and the elements read (safetensors) or dequantized (GGUF) are counted: a loader that reads
whole tensors and narrows afterwards reads about twice as much and fails."""
import pytest
import torch
from safetensors.torch import load_file
from transformers import LlamaConfig

from ascendtile.model import load_model
from ascendtile.model.loading import checkpoint, gguf_reader
from model.gguf_writer import write_llama_gguf
from model.helpers import save_tiny

# Intermediate 96: down_proj's 48-column halves are not Q8_0-block (32) aligned, o_proj's 32 are.
SIZES = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, initializer_range=0.1, max_position_embeddings=128, rms_norm_eps=1e-5,
             tie_word_embeddings=False)
CONFIG = LlamaConfig(**SIZES)  # GGUF metadata has no bias flags
CONFIG_BIASES = LlamaConfig(**SIZES, attention_bias=True, mlp_bias=True)


class _CountingSlice:
    def __init__(self, inner, counter: list[int]) -> None:
        self.inner, self.counter = inner, counter

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def __getitem__(self, index):
        tensor = self.inner[index]
        self.counter[0] += tensor.numel()
        return tensor


class _CountingHandle:
    """safe_open's handle, counting every element it hands out (whole tensors or slices)."""

    def __init__(self, handle, counter: list[int]) -> None:
        self.handle, self.counter = handle, counter

    def __enter__(self):
        self.inner = self.handle.__enter__()
        return self

    def __exit__(self, *exc):
        return self.handle.__exit__(*exc)

    def keys(self):
        return self.inner.keys()

    def get_tensor(self, name):
        tensor = self.inner.get_tensor(name)
        self.counter[0] += tensor.numel()
        return tensor

    def get_slice(self, name):
        return _CountingSlice(self.inner.get_slice(name), self.counter)


def _shards_match(model, whole, rank: int) -> None:
    """Every parameter of rank `rank` (of 2) equals the TP=1 parameter narrowed to its share."""
    q, kv, inter, vocab = (slice(n * rank, n * rank + n) for n in (32, 16, 48, 64))
    want = dict(whole.named_parameters())
    for name, got in model.named_parameters():
        full = want[name]
        if name.endswith("qkv_proj.weight") or name.endswith("qkv_proj.bias"):
            full = torch.cat([full[:64][q], full[64:96][kv], full[96:][kv]])
        elif name.endswith("gate_up_proj.weight") or name.endswith("gate_up_proj.bias"):
            full = torch.cat([full[:96][inter], full[96:][inter]])
        elif name.endswith("o_proj.weight"):
            full = full[:, q]
        elif name.endswith("down_proj.weight"):
            full = full[:, inter]
        elif name in ("model.embed_tokens.weight", "lm_head.weight"):
            full = full[vocab]
        torch.testing.assert_close(got, full, rtol=0, atol=0, msg=name)


@pytest.mark.parametrize("rank", [0, 1])
def test_safetensors_rank_reads_only_its_slices(tmp_path, as_rank, monkeypatch, rank):
    save_tiny(CONFIG_BIASES, tmp_path)
    whole = load_model(str(tmp_path)).model
    assert sum(t.numel() for t in load_file(tmp_path / "model.safetensors").values()) == \
        sum(p.numel() for p in whole.parameters())  # every checkpoint element is a parameter's
    counter = [0]
    opener = checkpoint.safe_open
    monkeypatch.setattr(checkpoint, "safe_open", lambda *a, **k: _CountingHandle(opener(*a, **k), counter))
    as_rank(2, rank)
    model = load_model(str(tmp_path)).model
    _shards_match(model, whole, rank)
    assert counter[0] == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("rank", [0, 1])
def test_gguf_rank_dequantizes_only_its_rows_and_blocks(tmp_path, as_rank, monkeypatch, rank):
    hf_model = save_tiny(CONFIG, tmp_path / "hf")
    write_llama_gguf(hf_model, tmp_path / "tiny.gguf")
    whole = load_model(str(tmp_path / "tiny.gguf")).model
    counter = [0]
    dequantize = gguf_reader.dequantize

    def counting(data, qtype):
        out = dequantize(data, qtype)
        counter[0] += out.size
        return out

    monkeypatch.setattr(gguf_reader, "dequantize", counting)
    as_rank(2, rank)
    model = load_model(str(tmp_path / "tiny.gguf")).model
    _shards_match(model, whole, rank)
    # Every element of the shard, plus each layer's whole down_proj: its 48-column halves are
    # not whole Q8_0 blocks, so its rows are dequantized and then narrowed.
    unaligned = CONFIG.num_hidden_layers * CONFIG.hidden_size * CONFIG.intermediate_size // 2
    assert counter[0] == sum(p.numel() for p in model.parameters()) + unaligned
