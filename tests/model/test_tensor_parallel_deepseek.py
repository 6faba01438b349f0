"""Tensor parallelism for DeepSeek-V2 (layers/mla.py, layers/moe.py): TP=2 over 2 gloo processes
gives the TP=1 logits, within the fp32 tolerance, for the tiny random checkpoints of CASES (MLA
with dense MLPs and attention biases; MLA with low-rank q; MoE with a shared expert after a dense
layer), in test_tensor_parallel.py's one spawned run of every architecture's cases; each rank
loads only its heads of q_b_proj / kv_b_proj / o_proj and its rows of every expert, absorbs W_UK /
W_UV for its heads only and keeps the whole latent cache; an MoE layer all-reduces once; sizes that
cannot be split give errors naming the config field."""
import copy

import pytest
import torch
from safetensors.torch import load_file

from ascendtile.model import load_model
from ascendtile.model.layers import moe as moe_module
from ascendtile.model.layers import parallel_linear
from ascendtile.model.layers.moe import MoE
from ascendtile.model.layers.parallel_linear import RowParallelLinear
from ascendtile.model.layers.partition import split_evenly
from model.helpers import save_tiny
from model.test_deepseek_v2_parity import CASES as PARITY_CASES
from tolerances import assert_close


def _variant(case: str, **fields):
    """A copy of a parity-test config with some fields changed (a copy: save_tiny writes into the
    config it saves)."""
    config = copy.deepcopy(PARITY_CASES[case])
    for name, value in fields.items():
        setattr(config, name, value)
    return config


# 4 heads (2 per rank), intermediate 96, moe_intermediate 32, vocab 128: every split is even.
CASES = {
    "mla_dense_biases": _variant("moe_greedy", first_k_dense_replace=2, attention_bias=True, mlp_bias=True),
    "mla_q_lora": _variant("dense_q_lora"),
    "moe_shared_expert": _variant("moe_greedy"),  # layer 0 dense, layer 1 top-2 of 4 + 1 shared
}


@pytest.mark.parametrize("rank", [0, 1])
def test_rank_loads_only_its_shard(tmp_path, as_rank, rank):
    save_tiny(_variant("moe_greedy", q_lora_rank=24), tmp_path)
    full = load_file(tmp_path / "model.safetensors")
    as_rank(2, rank)
    model = load_model(str(tmp_path)).model
    attn, dense, moe = model.model.layers[1].self_attn, model.model.layers[0].mlp, model.model.layers[1].mlp

    def rows(size):  # this rank's half of a dimension of `size` items
        return slice(size // 2 * rank, size // 2 * (rank + 1))

    p = "model.layers.1.self_attn."
    for name in ("q_a_proj", "kv_a_proj_with_mqa"):  # the latent projections are replicated
        torch.testing.assert_close(getattr(attn, name).weight, full[p + name + ".weight"], rtol=0, atol=0)
    # heads 2r, 2r+1: q rows of nope+rope 32, kv_b rows of nope+v 40, o_proj columns of v 24
    torch.testing.assert_close(attn.q_b_proj.weight, full[p + "q_b_proj.weight"][rows(128)], rtol=0, atol=0)
    torch.testing.assert_close(attn.kv_b_proj.weight, full[p + "kv_b_proj.weight"][rows(160)], rtol=0, atol=0)
    torch.testing.assert_close(attn.o_proj.weight, full[p + "o_proj.weight"][:, rows(96)], rtol=0, atol=0)
    kv_b = full[p + "kv_b_proj.weight"].view(4, 40, 32)[rows(4)]
    assert attn.num_heads == 2 and attn.w_uk.shape == (2, 16, 32) and attn.w_uv.shape == (2, 24, 32)
    torch.testing.assert_close(attn.w_uk, kv_b[:, :16], rtol=0, atol=0)
    torch.testing.assert_close(attn.w_uv, kv_b[:, 16:], rtol=0, atol=0)

    torch.testing.assert_close(dense.down_proj.weight, full["model.layers.0.mlp.down_proj.weight"][:, rows(96)])
    m = "model.layers.1.mlp."
    torch.testing.assert_close(moe.gate.weight, full[m + "gate.weight"], rtol=0, atol=0)
    for expert, prefix in ((moe.experts[3], m + "experts.3."), (moe.shared_experts, m + "shared_experts.")):
        torch.testing.assert_close(expert.gate_up_proj.weight, torch.cat(
            [full[prefix + "gate_proj.weight"][rows(32)], full[prefix + "up_proj.weight"][rows(32)]]), rtol=0, atol=0)
        torch.testing.assert_close(expert.down_proj.weight, full[prefix + "down_proj.weight"][:, rows(32)])
    model.allocate_kv_cache(3, 16, torch.float32, "cpu")  # every rank caches the whole latent + k_pe
    assert attn.kv_cache.shape == (3, 16, 32 + 16)


def test_moe_layer_all_reduces_once(as_rank, monkeypatch):
    as_rank(2, 0)
    moe = MoE(16, 8, num_experts=4, top_k=2, num_shared_experts=1, routed_scaling_factor=1.0)
    with torch.no_grad():
        for param in moe.parameters():
            param.normal_()
    calls = []
    for module in (moe_module, parallel_linear):
        monkeypatch.setattr(module, "all_reduce", lambda x: calls.append(x.shape) or x)
    moe(torch.randn(5, 16))
    assert calls == [(5, 16)]


def test_row_parallel_partials_sum_to_the_output():
    weight, bias, x = torch.randn(6, 8), torch.randn(6), torch.randn(3, 8)
    partials = []
    for rank in range(2):  # the bias is in rank 0's partial only
        share = split_evenly(8, "in_features", 2, rank)
        linear = RowParallelLinear(share, 6, bias=True, reduce_results=False)
        with torch.no_grad():
            linear.weight.copy_(weight[:, share.start: share.start + share.count])
            linear.bias.copy_(bias)
        partials.append(linear(x[:, share.start: share.start + share.count]))
    assert_close(partials[0] + partials[1], x @ weight.T + bias)


@pytest.mark.parametrize("fields, field", [
    (dict(num_attention_heads=3, hidden_size=48), "num_attention_heads"),
    (dict(moe_intermediate_size=31), "moe_intermediate_size"),
])
def test_unsplittable_sizes_name_the_field(tmp_path, as_rank, fields, field):
    # config.json alone: the error comes before any weight is read
    _variant("moe_greedy", architectures=["DeepseekV2ForCausalLM"], **fields).save_pretrained(tmp_path)
    as_rank(2, 0)
    with pytest.raises(ValueError, match=rf"^{field}: .*tensor_parallel_size 2"):
        load_model(str(tmp_path))
