"""Every architecture of the model zoo and the stub model satisfy the runtime's model protocol
(ascendtile/runtime/model_interface.py): every member present, every method's parameter names
equal to the protocol's — so renaming a method or a parameter on either side fails here. Each
architecture, built from a tiny config, also generates through LLM."""
from __future__ import annotations

import inspect

import pytest
from torch import nn

from ascendtile.bench.stub_model import StubConfig, StubModel, stub_loaded
from ascendtile.model import LoadedModel, parse_config
from ascendtile.runtime import LLM, SamplingParams
from ascendtile.runtime.model_interface import RuntimeModel, RuntimeModelConfig, protocol_members, require
from model.helpers import random_loaded

BASE = {"vocab_size": 96, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64, "eos_token_id": 3}
TINY = {  # architectures[0] -> the extra config.json fields of a tiny model
    "LlamaForCausalLM": {},
    "MistralForCausalLM": {"sliding_window": 8},
    "Qwen2ForCausalLM": {},
    "Qwen3ForCausalLM": {"head_dim": 16},
    "Gemma3ForCausalLM": {"head_dim": 8, "query_pre_attn_scalar": 8, "sliding_window": 8, "sliding_window_pattern": 2},
    "DeepseekV2ForCausalLM": {"num_key_value_heads": 4, "moe_intermediate_size": 16, "n_routed_experts": 4,
                              "n_shared_experts": 1, "num_experts_per_tok": 2, "first_k_dense_replace": 1,
                              "kv_lora_rank": 16, "q_lora_rank": None, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8,
                              "v_head_dim": 8, "n_group": 1, "topk_group": 1},
}
METHODS = [name for name in protocol_members(RuntimeModel) if name != "__call__"]  # nn.Module's __call__ is generic


def tiny(architecture: str) -> LoadedModel:
    config = parse_config({**BASE, **TINY[architecture], "architectures": [architecture]})
    return random_loaded(config)


def signature_mismatches(model: object) -> list[str]:
    """Methods whose parameter names differ from the protocol's (self excluded)."""
    bad = []
    for name in METHODS:
        want = list(inspect.signature(getattr(RuntimeModel, name)).parameters)[1:]
        got = list(inspect.signature(getattr(model, name)).parameters)
        if got != want:
            bad.append(f"{name}{tuple(got)} != {tuple(want)}")
    return bad


def subjects():
    yield from ((arch, tiny(arch)) for arch in TINY)
    yield "stub", stub_loaded()
    yield "stub_free", LoadedModel(StubModel(64, vocab_size=96, hidden_size=8, free=True), None, StubConfig(vocab_size=96))


@pytest.mark.parametrize("loaded", [pytest.param(loaded, id=name) for name, loaded in subjects()])
def test_satisfies_protocol(loaded):
    assert isinstance(loaded.model, RuntimeModel) and callable(loaded.model)
    assert signature_mismatches(loaded.model) == []
    assert isinstance(loaded.config, RuntimeModelConfig)


@pytest.mark.parametrize("architecture", list(TINY))
def test_runtime_drives_each_architecture(architecture):
    llm = LLM(tiny(architecture), max_model_len=64, max_num_seqs=4, max_num_batched_tokens=4, block_size=16,
              num_kv_blocks=16)
    params = SamplingParams(temperature=0, max_tokens=5, ignore_eos=True)
    outs = llm.generate([[5, 6, 7, 8, 9, 10, 11], [12, 13]], params, use_tqdm=False)  # 4-token chunks
    assert [len(o.outputs[0].token_ids) for o in outs] == [5, 5]
    alone = llm.generate([[12, 13]], params, use_tqdm=False)  # batch composition changes nothing
    assert alone[0].outputs[0].token_ids == outs[1].outputs[0].token_ids


class Renamed(nn.Module):
    """The stub with compute_logits renamed to logits."""

    def __init__(self) -> None:
        super().__init__()
        self.stub = StubModel()

    def forward(self, input_ids, positions, attn_metadata):
        return self.stub(input_ids, positions, attn_metadata)

    def logits(self, hidden):
        return self.stub.compute_logits(hidden)

    def kv_cache_bytes_per_block(self, block_size, dtype, kv_cache_dtype="auto"):
        return self.stub.kv_cache_bytes_per_block(block_size, dtype, kv_cache_dtype)

    def allocate_kv_cache(self, num_blocks, block_size, dtype, device, kv_cache_dtype="auto"):
        self.stub.allocate_kv_cache(num_blocks, block_size, dtype, device, kv_cache_dtype)


class RenamedParameter(StubModel):
    def allocate_kv_cache(self, blocks, block_size, dtype, device, kv_cache_dtype="auto"):
        super().allocate_kv_cache(blocks, block_size, dtype, device, kv_cache_dtype)


def test_renamed_method_or_parameter_is_caught():
    assert not isinstance(Renamed(), RuntimeModel)
    with pytest.raises(TypeError, match="^model: Renamed is not a RuntimeModel .missing compute_logits;"):
        LLM(LoadedModel(Renamed(), None, StubConfig()))
    assert isinstance(RenamedParameter(), RuntimeModel)  # isinstance sees names only ...
    assert signature_mismatches(RenamedParameter()) == [  # ... the signature check sees parameters
        "allocate_kv_cache('blocks', 'block_size', 'dtype', 'device', 'kv_cache_dtype') != "
        "('num_blocks', 'block_size', 'dtype', 'device', 'kv_cache_dtype')"]
    with pytest.raises(TypeError, match="^model: object is not a RuntimeModelConfig .missing eos_token_id, "
                                        "max_position_embeddings, vocab_size;"):
        LLM(LoadedModel(StubModel(), None, object()))
