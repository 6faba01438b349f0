"""The embedded models loaded with quantization="w4a16": SmolLM2 (Q4_1 in every linear) and Gemma 3
270M (Q4_K_M: its Q4_K o_proj and half its down_proj; the Q5_0 / Q8_0 / Q6_K linears stay float)
keep the file's 4-bit weights, bit-identical to the dequantized float model's, and in fp32 (the
exact op) give its logits and greedy tokens; in bf16 (the default for W4A16) decode takes torch's
int4 kernel; RTN W4A16 of SmolLM2's float weights has a measured perplexity bound.

Bounds (measured on this CPU, 2026-11-25):
- fp32 W4A16 vs the fp32 float model: max |Δlogit| < 5e-4, test_smollm2.py's bound (observed
  7e-5 SmolLM2, 4e-5 Gemma 3: the same weights, summation order only); greedy tokens equal.
- bf16 W4A16 vs the bf16 float model on public_domain.txt: perplexity within 1% (observed 12.795
  vs 12.783; the W4A16 prefill multiplies by the exact fp32 weights, the float model by weights
  rounded to bf16) and teacher-forced top-1 agreement >= 92% (observed 95.2%: bf16 near-ties).
- RTN (asymmetric, group 64, load_model's choice for SmolLM2's 576-wide inputs) of the float
  weights: perplexity at most 2.3x the fp32 model's (observed 12.81 -> 26.3, 2.06x). The float
  weights are already the GGUF's Q4_1 grid (free fp16 min per 32); RTN puts them on another one
  (an integer zero point per 64), so two 4-bit roundings compound on a 135M model.
"""
import copy
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from ascendtile.model import load_model, quantize_w4a16
from ascendtile.model.layers import int4pack
from ascendtile.model.layers.linear import Linear
from ascendtile.runtime import LLM, SamplingParams
from embedded import GEMMA3, NEW_TOKENS, PARITY, SMOLLM2
from model.helpers import PagedDriver

pytestmark = pytest.mark.slow

ATOL = 5e-4
BF16_PPL_RATIO = 1.01
BF16_AGREEMENT = 0.92
RTN_PPL_RATIO = 2.3
TEXT = (Path(__file__).parents[1] / "data" / "public_domain.txt").read_text()
GEMMA_PROMPT = "The capital of France is"


def _linears(model) -> dict[str, Linear]:
    return {name: m for name, m in model.named_modules() if isinstance(m, Linear)}


def _same_weights(w4a16, float_model) -> int:
    """Asserts every W4A16 Linear dequantizes to the float model's weight exactly; returns how many."""
    floats = _linears(float_model)
    quantized = {name: m for name, m in _linears(w4a16).items() if m.kind == "w4a16"}
    for name, linear in quantized.items():
        assert torch.equal(linear.dequantized_weight(torch.float32), floats[name].weight), name
    return len(quantized)


def _greedy_parity(w4a16, float_model, prompt: list[int], steps: int) -> None:
    a, b = PagedDriver(float_model, 1, blocks_per_seq=8), PagedDriver(w4a16, 1, blocks_per_seq=8)
    want, got = a.step({0: prompt}), b.step({0: prompt})
    for _ in range(steps):
        assert (got - want).abs().max().item() < ATOL
        token = int(want[-1].argmax())
        assert int(got[-1].argmax()) == token
        want, got = a.step({0: [token]}), b.step({0: [token]})


def _logits(model, ids: list[int], dtype: torch.dtype) -> torch.Tensor:
    return PagedDriver(model, 1, blocks_per_seq=-(-len(ids) // 16), dtype=dtype).step({0: ids})


def _perplexity(logits: torch.Tensor, ids: list[int]) -> float:
    return F.cross_entropy(logits[:-1], torch.tensor(ids[1:])).exp().item()


@pytest.fixture(scope="module")
def smollm2_w4a16():
    return load_model("default", torch.float32, quantization="w4a16")


@pytest.fixture(scope="module")
def smollm2_w4a16_bf16():
    return load_model("default", quantization="w4a16")


@SMOLLM2
def test_smollm2_keeps_the_files_4bit_weights(smollm2, smollm2_w4a16):
    assert _same_weights(smollm2_w4a16.model, smollm2.model) == 4 * 30  # every linear but the tied head
    assert {m.group_size for m in _linears(smollm2_w4a16.model).values()} == {32}


@SMOLLM2
def test_smollm2_fp32_greedy_generate_equals_float(smollm2, smollm2_w4a16):
    params = SamplingParams(temperature=0, max_tokens=NEW_TOKENS // 2)  # each fp32 W4A16 step dequantizes every weight
    run = dict(max_model_len=256, max_num_seqs=4, block_size=16)
    want = [o.outputs[0].token_ids for o in LLM(smollm2, **run).generate(PARITY, params, use_tqdm=False)]
    got = [o.outputs[0].token_ids for o in LLM(smollm2_w4a16, **run).generate(PARITY, params, use_tqdm=False)]
    assert got == want
    _greedy_parity(smollm2_w4a16.model, smollm2.model, smollm2.tokenizer.encode(PARITY[0]), steps=2)


@SMOLLM2
def test_smollm2_bf16_decode_takes_int4pack(smollm2_w4a16_bf16, monkeypatch):
    if not int4pack.cpu_vectorises_int4pack():
        pytest.skip("int4pack is used only where torch's CPU kernels are AVX2 / AVX-512 builds")
    calls = []
    path = int4pack.Int4Pack.linear
    monkeypatch.setattr(int4pack.Int4Pack, "linear", lambda *a: calls.append(1) or path(*a))
    driver = PagedDriver(smollm2_w4a16_bf16.model, 2, dtype=torch.bfloat16)
    driver.step({0: [1, 2, 3], 1: [4, 5]})
    assert len(calls) == 4 * 30  # every linear of every layer
    logits = driver.step({0: [6], 1: [7]})
    assert len(calls) == 2 * 4 * 30 and torch.isfinite(logits).all()


@SMOLLM2
def test_smollm2_bf16_against_bf16_float(smollm2, smollm2_w4a16_bf16):
    ids = smollm2.tokenizer.encode(TEXT)
    float_bf16 = load_model("default", dtype=torch.bfloat16).model
    want, got = _logits(float_bf16, ids, torch.bfloat16), _logits(smollm2_w4a16_bf16.model, ids, torch.bfloat16)
    assert _perplexity(got, ids) <= _perplexity(want, ids) * BF16_PPL_RATIO
    assert (got.argmax(-1) == want.argmax(-1)).float().mean().item() >= BF16_AGREEMENT


@SMOLLM2
def test_smollm2_rtn_perplexity(smollm2):
    ids = smollm2.tokenizer.encode(TEXT)
    rtn = quantize_w4a16(copy.deepcopy(smollm2.model), 64)
    fp32_ppl, rtn_ppl = _perplexity(_logits(smollm2.model, ids, torch.float32), ids), \
        _perplexity(_logits(rtn, ids, torch.float32), ids)
    assert fp32_ppl < 20
    assert fp32_ppl < rtn_ppl < fp32_ppl * RTN_PPL_RATIO, (fp32_ppl, rtn_ppl)


@GEMMA3
def test_gemma3_q4_k_linears_fp32(gemma3):
    w4a16 = load_model("gemma3-270m", torch.float32, quantization="w4a16")
    kinds = {name: m.kind for name, m in _linears(w4a16.model).items()}
    assert all(kinds[f"model.layers.{i}.self_attn.o_proj"] == "w4a16" for i in range(18))
    assert sum(kind == "w4a16" for kind in kinds.values()) == 18 + 9  # o_proj, and down_proj where Q4_K
    assert all(kinds[f"model.layers.{i}.self_attn.qkv_proj"] == "float" for i in range(18))  # Q5_0 / Q8_0
    assert _same_weights(w4a16.model, gemma3.model) == 27
    _greedy_parity(w4a16.model, gemma3.model, gemma3.tokenizer.encode(GEMMA_PROMPT), steps=4)
