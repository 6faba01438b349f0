"""`ascendtile bench kernels --quick` and the pytest-benchmark files run end to end on CPU and
produce their table, JSON and roofline PNG. Timings are never asserted."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ascendtile.bench.cases import all_cases
from ascendtile.bench.roofline import roofline_metrics
from ascendtile.cli import main
from ascendtile.bench.peaks import DevicePeak

REPO = Path(__file__).resolve().parents[2]
ROW_FIELDS = {"family", "op", "name", "shape", "dtype", "bytes", "flops", "time_us", "gbps", "tflops",
              "intensity", "bw_frac", "compute_frac", "roofline_frac"}


def test_cli_quick_writes_json_png_and_table(tmp_path, capsys):
    assert main(["bench", "kernels", "--quick", "--out", str(tmp_path)]) == 0
    record = json.loads((tmp_path / "kernels.json").read_text())
    assert record["benchmark"] == "kernels" and record["implementation"] == "reference"
    assert {"name", "hbm_gbps", "matrix_tflops", "source"} <= set(record["peak"])
    assert {"device", "time_utc", "torch"} <= set(record["context"])
    ops = {row["op"] for row in record["rows"]}
    assert {"rms_norm", "fused_add_rms_norm", "silu_and_mul", "gelu_tanh_and_mul"} <= ops
    assert not record["errors"] and not record["skipped_on_cpu"]
    for row in record["rows"]:
        assert ROW_FIELDS <= set(row), row["name"]
        assert row["bytes"] > 0 and row["flops"] >= 0 and row["time_us"] > 0  # copies (KV cache, mask) have 0 FLOPs
    png = (tmp_path / "roofline.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
    table = capsys.readouterr().out
    assert "% roofline" in table and "rms_norm[tokens=7,hidden=576,float32]" in table


def test_family_filter_and_unknown_family(tmp_path):
    import torch

    assert main(["bench", "kernels", "--quick", "--family", "norm", "--out", str(tmp_path)]) == 0
    ops = {row["op"] for row in json.loads((tmp_path / "kernels.json").read_text())["rows"]}
    assert ops == {"rms_norm", "fused_add_rms_norm"}
    with pytest.raises(ValueError, match="^families: unknown"):  # the CLI's one line: tests/runtime/test_cli.py
        all_cases(torch.float32, quick=True, only=["nope"])


def test_case_bytes_and_flops_follow_the_shape():
    # rms_norm over [T, H] in fp32: read x, write out (T*H each), read the weight (H); 4 FLOPs per element.
    import torch

    case = next(c for c in all_cases(torch.float32, quick=True, only=["norm"]) if c.op == "rms_norm")
    t, h = case.shape["tokens"], case.shape["hidden"]
    assert case.bytes_moved == (2 * t * h + h) * 4 and case.flops == 4 * t * h


def test_roofline_fraction_is_the_bound_over_the_time():
    peak = DevicePeak("toy", hbm_gbps=100.0, matrix_tflops=1.0, source="test")
    memory_bound = roofline_metrics(bytes_moved=10**9, flops=10**9, seconds=0.02, peak=peak)
    assert memory_bound["gbps"] == pytest.approx(50.0) and memory_bound["roofline_frac"] == pytest.approx(0.5)
    compute_bound = roofline_metrics(bytes_moved=10**6, flops=10**12, seconds=4.0, peak=peak)
    assert compute_bound["roofline_frac"] == pytest.approx(0.25) and compute_bound["intensity"] == 1e6


def test_pytest_benchmark_files_run_once_in_quick_mode():
    env = {**os.environ, "ASCENDTILE_BENCH_QUICK": "1"}
    env.pop("TRITON_INTERPRET", None)  # the benchmarks time the CPU reference path, as users run them
    done = subprocess.run([sys.executable, "-m", "pytest", "bench", "-q", "-p", "no:cacheprovider", "--benchmark-disable"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert " passed" in done.stdout



def test_int8_kv_cache_cases_read_about_half_the_bytes():
    """Each decode attention case over a bf16 cache has its twin over an int8 cache (kv_int8=1),
    which reads one byte per cached value plus fp32 scales per token (paged: per KV head, for K and
    V; MLA: latent and rope part): per context token 408 instead of 768 bytes at SmolLM2's 3 heads
    of 64 (0.53x), 8448 instead of 16384 at Llama-2's 32 of 128 (0.52x), 584 instead of 1152 for a
    DeepSeek latent (0.51x). Whole cases include the queries and outputs too (MLA's 128 heads: 0.56x)."""
    import torch

    cases = all_cases(torch.bfloat16, quick=False, only=["attention_paged", "mla"])
    float_cases = {(c.op, tuple(c.shape.items())): c for c in cases if "kv_int8" not in c.shape}
    pairs = [(c, float_cases[(c.op, tuple((k, v) for k, v in c.shape.items() if k != "kv_int8"))])
             for c in cases if "kv_int8" in c.shape]
    assert len(pairs) == len(float_cases) == 9
    for int8, bf16 in pairs:
        limit = 0.56 if int8.shape.get("heads") == 128 else 0.535
        assert int8.bytes_moved <= limit * bf16.bytes_moved, int8.name
        assert int8.flops == bf16.flops
