"""`ascendtile bench host --quick` times the runtime's per-step CPU work with the model stubbed
out and reports every stage; `--forward hollow` runs the real model code at small widths and
times its forward as a stage of its own. Timings are never asserted."""
import json

import pytest

from ascendtile.bench.hollow_model import HOLLOW_WIDTHS, hollow_model
from ascendtile.bench.host_overhead import MODES
from ascendtile.cli import main

STAGES = ("schedule_us", "prepare_us", "model_us", "sample_us", "bookkeeping_us")


def test_host_quick_reports_every_stage(tmp_path, capsys):
    assert main(["bench", "host", "--quick", "--out", str(tmp_path)]) == 0
    record = json.loads((tmp_path / "host.json").read_text())
    assert {(r["batch"], r["mode"]) for r in record["rows"]} == {(b, m) for b in (1, 4) for m in MODES}
    assert {"greedy", "top_p", "top_p_peaked", "top_p_peaked_penalties"} <= set(MODES)
    for row in record["rows"]:
        assert row["step_us"] > 0 and row["per_token_us"] > 0 and row["steps"] == 3
        assert all(stage in row for stage in STAGES) and row["forward_us"] is None
        assert row["schedule_us"] > 0 and row["prepare_us"] > 0 and row["sample_us"] > 0
    assert record["stub"]["vocab_size"] == 49152
    assert "per token us" in capsys.readouterr().out


def test_hollow_model_keeps_the_default_models_layers_at_small_widths():
    loaded = hollow_model("cpu")
    config = loaded.config
    assert (config.num_hidden_layers, config.vocab_size) == (30, 49152)  # SmolLM2's depth and vocabulary
    assert {k: getattr(config, k) for k in HOLLOW_WIDTHS} == HOLLOW_WIDTHS
    assert len(loaded.model.model.layers) == 30
    assert all(p.abs().max() < 1 and p.std() > 0 for p in loaded.model.parameters())  # drawn, not left empty


def test_host_hollow_forward_is_timed_as_its_own_stage(tmp_path, capsys):
    assert main(["bench", "host", "--quick", "--forward", "hollow", "--out", str(tmp_path)]) == 0
    record = json.loads((tmp_path / "host.json").read_text())
    assert record["forward"] == "hollow" and record["compilation_level"] == 0
    assert [(r["batch"], r["mode"]) for r in record["rows"]] == [(1, "greedy"), (4, "greedy")]
    for row in record["rows"]:
        assert 0 < row["forward_us"] <= row["model_us"]
    assert "hollow model" in capsys.readouterr().out


def test_host_stub_does_not_compile(tmp_path):
    from ascendtile.bench.host_overhead import run

    with pytest.raises(ValueError, match="compilation_level"):
        run([1], 1, tmp_path, forward="stub", compilation_level=2)


def test_host_cpu_decode_graph_needs_level_2(tmp_path, capsys):
    assert main(["bench", "host", "--quick", "--forward", "hollow", "--cpu-decode-graph", "--out", str(tmp_path)]) == 2
    assert "cpu_decode_graph: only level 2" in capsys.readouterr().err
