"""`ascendtile generate` / `ascendtile demo` on the stub model (argument routing, output format,
exit status), the demo on the real embedded model, `ascendtile info`, `ascendtile check-ascend`'s
exit status (the gate itself runs in tests/lowering/test_gate.py), and bad input to every command:
one line and exit status 2, its traceback only with --debug, before any model loads."""
from __future__ import annotations

import multiprocessing
import re
from types import SimpleNamespace

import pytest

from ascendtile import cli
from ascendtile.bench.stub_model import stub_loaded
from ascendtile.runtime import llm as llm_module


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


def test_quantize_w4a16_flag_leaves_the_dtype_to_llm(stub_llm):
    """--quantize w4a16 without --dtype hands LLM dtype None (bf16 for W4A16, see default_dtype)."""
    assert cli.main(["generate", "--prompt", "a", "--max-tokens", "2", "--quantize", "w4a16"]) == 0
    assert stub_llm["quantization"] == "w4a16" and stub_llm["dtype"] is None
    with pytest.raises(SystemExit):
        cli.main(["generate", "--prompt", "a", "--quantize", "int4"])


def test_kv_cache_dtype_flag_reaches_llm(stub_llm, capsys):
    assert cli.main(["generate", "--prompt", "a", "--max-tokens", "2", "--kv-cache-dtype", "int8"]) == 0
    assert stub_llm["kv_cache_dtype"] == "int8"
    assert cli.build_parser().parse_args(["demo"]).kv_cache_dtype == "auto"
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["generate", "--prompt", "a", "--kv-cache-dtype", "fp8"])
    assert "--kv-cache-dtype" in capsys.readouterr().err


def test_tensor_parallel_size_reaches_llm(stub_llm):
    """The flag is parsed on generate and demo and handed to LLM (N > 1 itself runs in
    tests/runtime/test_tensor_parallel_llm.py)."""
    assert cli.main(["generate", "--prompt", "a", "--max-tokens", "2", "--tensor-parallel-size", "1"]) == 0
    assert stub_llm["tensor_parallel_size"] == 1
    for command in (["generate", "--prompt", "a"], ["demo"]):
        assert cli.build_parser().parse_args(command + ["--tensor-parallel-size", "2"]).tensor_parallel_size == 2


def test_demo_runs_chat_prompts(stub_llm, monkeypatch, capsys):
    from ascendtile.runtime import cli as runtime_cli

    monkeypatch.setattr(runtime_cli, "DEMO_PROMPTS", ["Hi", "Bye"])
    assert cli.main(["demo", "--max-tokens", "4"]) == 0
    out, err = capsys.readouterr()
    assert "### Hi" in out and "### Bye" in out and "2 requests" in out
    assert err.startswith("compilation level 0 (eager)") and stub_llm["compilation_config"] == 0


@pytest.mark.parametrize("level", [1, 3])
def test_generate_prints_the_compile_line_to_stderr(monkeypatch, capsys, level):
    """Routing only: the stub model has no weights to compile, so it runs eagerly and the engine's
    model answers describe() as a CompiledModel would (tests/compilation checks the line itself)."""
    real, line = llm_module.LLM, f"compilation level {level}: 1 compile(s), 0.0 s"

    def fake(model, **kw):
        assert kw.pop("compilation_config") == level
        llm = real(stub_loaded(), block_size=4, num_kv_blocks=128, **dict(kw, max_model_len=256))
        llm.engine.model = SimpleNamespace(describe=lambda: line)
        return llm

    monkeypatch.setattr(llm_module, "LLM", fake)
    assert cli.main(["generate", "--prompt", "abc", "--max-tokens", "3", "--compilation-level", str(level)]) == 0
    out, err = capsys.readouterr()
    assert "tokens/s" in out and line not in out and err == line + "\n"


@pytest.mark.slow
def test_demo_on_the_embedded_model(capsys):
    """`make demo`'s command on SmolLM2 (8 tokens at most): every prompt completes, and the first
    answer is its greedy tokens up to EOS (the same chat prompt's first greedy tokens are checked
    against HF's in tests/model/test_smollm2.py)."""
    assert cli.main(["demo", "--max-tokens", "8"]) == 0
    out = capsys.readouterr().out
    assert out.count("### ") == 4 and out.count("finish_reason=") == 4 and "[error]" not in out
    assert "4 requests" in out and " generated tokens in " in out
    first = out.split("### What is the capital of France?\n")[1].split("\n\n")[0]
    assert first == "The capital of France is Paris.\n[8 tokens, finish_reason=stop]"


def test_info_lists_device_versions_and_ops(capsys):
    import torch

    from ascendtile.ops import REGISTERED

    assert cli.main(["info"]) == 0
    rows = dict(re.split(r"\s{2,}", line.strip(), maxsplit=1) for line in capsys.readouterr().out.splitlines())
    assert rows["device"] == "cpu" and rows["torch"] == torch.__version__
    assert set(rows["ops registered"].split(", ")) == set(REGISTERED) >= {"rms_norm", "scaled_mm", "mla_attention"}
    assert any(key.startswith("peak: ") for key in rows)


@pytest.mark.parametrize("ok, json_flag, status", [(True, False, 0), (False, False, 1), (False, True, 0)])
def test_check_ascend_exit_status(monkeypatch, capsys, ok, json_flag, status):
    """0 when every case passes, 1 when one fails; with --json always 0 (the caller judges)."""
    from ascendtile.lowering import gate

    report = gate.LoweringReport("case[x]", ok=ok, mix_mode="aiv", expect_mode="aiv", hivm_ok=True, ub_bytes=1024)
    seen = []
    monkeypatch.setattr(gate, "run_gate", lambda families, cases: seen.append(families) or [report])
    assert cli.main(["check-ascend", "--family", "norm"] + (["--json"] if json_flag else [])) == status
    out = capsys.readouterr().out
    assert seen == [["norm"]] and ("case[x]" in out) and (("FAIL" in out) == (not ok and not json_flag))


@pytest.fixture
def no_model_load(monkeypatch):
    """LLM refuses to be built: the command must fail before it loads a model."""
    def refuse(model, **kw):
        raise AssertionError(f"LLM({model!r}) was built: bad input must fail before the load")

    monkeypatch.setattr(llm_module, "LLM", refuse)


def _one_line_error(argv: list[str], capsys) -> str:
    """Runs the command, checks exit status 2, nothing on stdout and one line on stderr; returns it."""
    assert cli.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err and len(err.splitlines()) == 1, err
    assert err.startswith("ascendtile: error: ")
    return err.removeprefix("ascendtile: error: ").rstrip("\n")


def test_chat_on_a_model_without_a_chat_template_is_one_line_before_the_load(no_model_load, capsys):
    """The review's case: the embedded Gemma 3 270M is a base model; its GGUF metadata (read, not
    its weights) has no chat template."""
    message = _one_line_error(["generate", "--model", "gemma3-270m", "--chat", "--prompt", "Hi"], capsys)
    assert message.startswith("--chat: model 'gemma3-270m' has no chat template")


@pytest.mark.parametrize("argv, message", [
    (["generate", "--prompt", "Hi", "--max-tokens", "0"], "max_tokens: must be an int >= 1"),
    (["generate", "--prompt", "Hi", "--top-p", "1.5"], "top_p: "),
    (["demo", "--max-tokens", "0"], "max_tokens: must be an int >= 1"),
], ids=["generate", "generate_top_p", "demo"])
def test_bad_sampling_values_fail_before_the_load(no_model_load, capsys, argv, message):
    assert _one_line_error(argv, capsys).startswith(message)


def test_speculative_flags_reach_llm_and_print_the_metrics(stub_llm, capsys):
    argv = ["generate", "--prompt", "abc", "--max-tokens", "6", "--speculative-method", "ngram",
            "--num-speculative-tokens", "3", "--prompt-lookup-max", "4"]
    assert cli.main(argv) == 0
    assert stub_llm["speculative_config"] == {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}
    assert "speculative decoding: " in capsys.readouterr().out
    assert cli.main(["generate", "--prompt", "abc", "--max-tokens", "2"]) == 0
    assert stub_llm["speculative_config"] is None and "speculative decoding" not in capsys.readouterr().out


SPEC = ["generate", "--prompt", "Hi", "--speculative-method", "ngram"]


@pytest.mark.parametrize("argv, message", [
    (SPEC + ["--num-speculative-tokens", "0"], "--num-speculative-tokens: must be >= 1"),
    (SPEC, "--num-speculative-tokens: required"),
    (["generate", "--prompt", "Hi", "--num-speculative-tokens", "2"], "--speculative-method: required"),
    (SPEC + ["--num-speculative-tokens", "2", "--prompt-lookup-min", "0"], "--prompt-lookup-min: must be >= 1"),
    (SPEC + ["--num-speculative-tokens", "2", "--prompt-lookup-min", "3", "--prompt-lookup-max", "2"],
     "--prompt-lookup-max: must be >= prompt_lookup_min"),
], ids=["k_0", "no_k", "no_method", "min_0", "max_below_min"])
def test_bad_speculative_flags_fail_before_the_load(no_model_load, capsys, argv, message):
    assert _one_line_error(argv, capsys).startswith(message)


def test_missing_model_path_is_one_line_also_with_spawned_ranks(tmp_path, capsys):
    """A path that names nothing, in this process and with --tensor-parallel-size 2 (refused in the
    parent before any rank is spawned, not as each rank's error)."""
    missing = str(tmp_path / "missing.gguf")
    for extra in ([], ["--tensor-parallel-size", "2"]):
        message = _one_line_error(["generate", "--model", missing, "--prompt", "Hi", *extra], capsys)
        assert message.startswith(f"model: {missing!r} is not an embedded model name")
    assert multiprocessing.active_children() == []


@pytest.mark.parametrize("argv, message", [
    (["info"], "ASCENDTILE_KERNELS must be 'triton' or 'reference', got 'bogus'"),
    (["check-ascend", "--family", "nosuch"], "families: unknown kernel families ['nosuch']"),
    (["bench", "kernels", "--family", "nosuch"], "families: unknown benchmark families ['nosuch']"),
    (["bench", "e2e", "--model", "no-such-model"], "model: 'no-such-model' is not an embedded model name"),
    (["bench", "host", "--compilation-level", "2"], "compilation_level: only the hollow model compiles"),
], ids=["info", "check-ascend", "bench-kernels", "bench-e2e", "bench-host"])
def test_bad_input_to_every_other_command_is_one_line(monkeypatch, tmp_path, capsys, argv, message):
    monkeypatch.setenv("ASCENDTILE_KERNELS", "bogus" if argv == ["info"] else "reference")
    out_dir = ["--out", str(tmp_path)] if argv[0] == "bench" else []
    assert _one_line_error(argv + out_dir, capsys).startswith(message)
    assert list(tmp_path.iterdir()) == []  # nothing written


@pytest.mark.parametrize("where", ["before", "after"])
def test_debug_prints_the_traceback_then_the_line(no_model_load, capsys, where):
    """--debug is global: before the command or among its arguments."""
    argv = ["generate", "--prompt", "Hi", "--max-tokens", "0"]
    assert cli.main(["--debug", *argv] if where == "before" else [*argv, "--debug"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("Traceback (most recent call last):")
    assert "ValueError: max_tokens: must be an int >= 1\n" in err
    assert err.splitlines()[-1] == "ascendtile: error: max_tokens: must be an int >= 1"


def test_other_exceptions_are_bugs_and_keep_their_traceback(monkeypatch):
    """Only bad input is shortened: anything else propagates (the interpreter prints its traceback)."""
    from ascendtile.lowering import gate

    def broken(families, cases):
        raise RuntimeError("internal")

    monkeypatch.setattr(gate, "run_gate", broken)
    with pytest.raises(RuntimeError, match="^internal$"):
        cli.main(["check-ascend"])
