"""`ascendkit bench host --quick` times the runtime's per-step CPU work with the model stubbed
out and reports every stage. Timings are never asserted."""
import json

from ascendkit.bench.host_overhead import MODES
from ascendkit.cli import main

STAGES = ("schedule_us", "prepare_us", "model_stub_us", "sample_us", "bookkeeping_us")


def test_host_quick_reports_every_stage(tmp_path, capsys):
    assert main(["bench", "host", "--quick", "--out", str(tmp_path)]) == 0
    record = json.loads((tmp_path / "host.json").read_text())
    assert {(r["batch"], r["mode"]) for r in record["rows"]} == {(b, m) for b in (1, 4) for m in MODES}
    assert {"greedy", "top_p", "top_p_peaked", "top_p_peaked_penalties"} <= set(MODES)
    for row in record["rows"]:
        assert row["step_us"] > 0 and row["per_token_us"] > 0 and row["steps"] == 3
        assert all(stage in row for stage in STAGES)
        assert row["schedule_us"] > 0 and row["prepare_us"] > 0 and row["sample_us"] > 0
    assert record["stub"]["vocab_size"] == 49152
    assert "per token us" in capsys.readouterr().out
