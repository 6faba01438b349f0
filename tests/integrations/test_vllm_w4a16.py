"""vLLM serves a W4A16 checkpoint we wrote (save_w4a16: compressed-tensors pack-quantized, bf16
scales, symmetric and asymmetric, groups of 32) with its own CPU kernel (CPUWNA16), and its greedy
tokens are those of the model we wrote (held in memory, not read back: a layout error the writer
and our reader share would otherwise go unseen): teacher-forced on vLLM's continuation, each of
its tokens is the argmax of that model's exact fp32 W4A16 logits, or within TIE of it (vLLM
computes in bf16, we in fp32, on the same weights: a near-tie may go either way). A wrong nibble
order, zero point or scale layout gives unrelated tokens. Observed (2026-11-25): every token our
argmax, in both checkpoints."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig

from ascendtile.model import load_model, quantize_w4a16, save_w4a16
from ascendtile.platform import cpu_isa
from model.helpers import PagedDriver, save_tiny
from vllm_venv import vllm_venv

SCRIPT = Path(__file__).with_name("vllm_w4a16_generate.py")
PROMPTS = [[5, 9, 100, 7, 2, 33, 61], list(range(3, 20)), [200, 1, 2]]
MAX_TOKENS = 12
TIE = 0.05  # |Δlogit| between our top-1 and vLLM's token, on logits of magnitude ~1-3
# Sizes multiples of 32, as vLLM's CPU W4A16 kernel requires of every linear's inputs and outputs.
CONFIG = LlamaConfig(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, initializer_range=0.1, max_position_embeddings=256, tie_word_embeddings=False)


@pytest.mark.slow
@pytest.mark.skipif("avx512f" not in cpu_isa(), reason="vLLM's CPU build has cpu_gemm_wna16 only with AVX-512 "
                    "(this CPU: " + cpu_isa() + ")")
def test_vllm_serves_our_w4a16_checkpoints(tmp_path):
    save_tiny(CONFIG, tmp_path / "float", randomize_norms=True)
    raw = json.loads((tmp_path / "float" / "config.json").read_text())
    models = {}
    for symmetric in (True, False):
        model = quantize_w4a16(load_model(str(tmp_path / "float"), dtype=torch.bfloat16).model, 32, symmetric=symmetric)
        directory = str(tmp_path / f"w4a16_symmetric_{symmetric}")
        save_w4a16(model, directory, raw)
        models[directory] = model.float()  # bf16 values exact in fp32; the 4-bit weights' fp32 scales and mins as they are
    directories = list(models)
    (tmp_path / "prompts.json").write_text(json.dumps(PROMPTS))
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "ASCENDTILE_KERNELS")}
    env.update(VLLM_CPU_KVCACHE_SPACE="1", HF_HUB_OFFLINE="1", VLLM_PLUGINS="")
    out = tmp_path / "tokens.json"
    run = subprocess.run([str(vllm_venv() / "bin" / "python"), str(SCRIPT), str(tmp_path / "prompts.json"),
                          str(MAX_TOKENS), str(out), *directories], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, f"vLLM run failed:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    tokens = json.loads(out.read_text())
    for directory, model in models.items():
        assert model.model.layers[0].mlp.down_proj.kind == "w4a16"
        for prompt, continuation in zip(PROMPTS, tokens[directory]):
            assert len(continuation) == MAX_TOKENS
            seq = prompt + continuation
            logits = PagedDriver(model, 1, blocks_per_seq=2).step({0: seq})[len(prompt) - 1:-1]
            chosen = logits.gather(1, torch.tensor(continuation)[:, None])[:, 0]
            assert (logits.max(dim=1).values - chosen <= TIE).all(), (directory, prompt, continuation)
