"""`ascendkit generate` / `ascendkit demo` on the stub model (argument routing, output format,
exit status) — the real embedded model runs in `make demo`."""
from __future__ import annotations

import pytest

from ascendkit import cli
from ascendkit.bench.stub_model import stub_loaded
from ascendkit.runtime import llm as llm_module


@pytest.fixture
def stub_llm(monkeypatch):
    real = llm_module.LLM
    seen = {}

    def fake(model, **kw):
        seen.update(kw, model=model)
        kw["max_model_len"] = min(kw["max_model_len"], 256)
        return real(stub_loaded(), block_size=4, num_kv_blocks=128, **kw)

    monkeypatch.setattr(llm_module, "LLM", fake)
    return seen


def test_generate_prints_completions_and_throughput(stub_llm, capsys):
    assert cli.main(["generate", "--model", "x.gguf", "--prompt", "abc", "--prompt", "Hello", "--max-tokens", "5"]) == 0
    out = capsys.readouterr().out
    assert "### abc" in out and "### Hello" in out and "tokens/s" in out
    assert stub_llm["model"] == "x.gguf" and stub_llm["quantization"] is None


def test_generate_chat_and_quantize_flags(stub_llm, capsys):
    assert cli.main(["generate", "--prompt", "Hi", "--chat", "--quantize", "w8a8", "--temperature", "0.7",
                     "--seed", "3"]) == 0
    assert stub_llm["quantization"] == "w8a8" and stub_llm["model"] == "default"
    assert "1 requests" in capsys.readouterr().out


def test_demo_runs_chat_prompts(stub_llm, monkeypatch, capsys):
    from ascendkit.runtime import cli as runtime_cli

    monkeypatch.setattr(runtime_cli, "DEMO_PROMPTS", ["Hi", "Bye"])
    assert cli.main(["demo", "--max-tokens", "4"]) == 0
    out = capsys.readouterr().out
    assert "### Hi" in out and "### Bye" in out and "2 requests" in out
