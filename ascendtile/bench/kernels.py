"""`ascendtile bench kernels`: time every op over the real model shapes, report bytes, FLOPs,
achieved GB/s and TFLOP/s against the device peak (roofline), write JSON and a roofline PNG.

On NPU/CUDA the registered ops run the Triton kernels (on NPU, the torch_npu fused op for the same
job is timed beside them, as a speedup ratio); on CPU they run the torch reference path, which
exercises the harness and measures the CPU production path.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import torch

from ascendtile import platform
from ascendtile.bench.peaks import DevicePeak, current_peak
from ascendtile.bench.cases import CPU_MAX_BYTES, CPU_MAX_FLOPS, KernelCase, all_cases, fits_cpu
from ascendtile.bench.report import format_table, write_json
from ascendtile.bench.roofline import plot_roofline, roofline_metrics
from ascendtile.bench.timing import measure, synchronize

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


def default_dtype() -> str:
    # CPUs here have no native bf16 matmul and slow half-precision math: CPU inference runs fp32.
    return "fp32" if platform.device_kind() == "cpu" else "bf16"


def implementation(device: torch.device) -> str:
    if device.type != "cpu":
        return "triton"
    from ascendtile.ops import kernel_path

    return kernel_path()


def run_case(case: KernelCase, device: torch.device, peak: DevicePeak, min_time_s: float) -> dict:
    timing = measure(case.setup(device), device, min_time_s=min_time_s)
    row = {
        "family": case.family, "op": case.op, "name": case.name, "shape": case.shape,
        "dtype": str(case.dtype).removeprefix("torch."), "bytes": case.bytes_moved, "flops": case.flops,
        "time_us": timing.median_us, "min_us": timing.min_s * 1e6, "calls": timing.calls,
        **roofline_metrics(case.bytes_moved, case.flops, timing.median_s, peak),
    }
    if case.baseline is not None and device.type in ("npu", "privateuseone"):
        base = measure(case.baseline(device), device, min_time_s=min_time_s)
        row.update(baseline=case.baseline_name, baseline_time_us=base.median_us,
                   baseline_tflops=case.flops / base.median_s / 1e12, speedup=base.median_s / timing.median_s)
    return row


def run(families: list[str] | None, dtype: str, quick: bool, out_dir: Path, min_time_s: float) -> dict:
    device = platform.default_device()
    cases = all_cases(DTYPES[dtype], quick, families)  # unknown families fail before the peak is measured
    peak = current_peak()
    skipped = [c.name for c in cases if device.type == "cpu" and not fits_cpu(c)]
    rows, errors = [], []
    for case in cases:
        if case.name in skipped:
            continue
        try:
            rows.append(run_case(case, device, peak, min_time_s))
        except Exception as exc:  # one broken op must not hide the others' numbers
            errors.append({"name": case.name, "error": f"{type(exc).__name__}: {exc}"})
    synchronize(device)
    payload = {
        "benchmark": "kernels", "implementation": implementation(device), "dtype": dtype, "quick": quick,
        "peak": {"name": peak.name, "hbm_gbps": peak.hbm_gbps, "matrix_tflops": peak.matrix_tflops, "source": peak.source},
        "rows": rows, "errors": errors, "skipped_on_cpu": skipped,
    }
    record = write_json(out_dir / "kernels.json", payload)
    plot_roofline(rows, peak, out_dir / "roofline.png")
    return record


def table(payload: dict) -> str:
    peak = payload["peak"]
    has_base = any("baseline" in r for r in payload["rows"])
    headers = ["case", "time us", "MB", "MFLOP", "GB/s", "GFLOP/s", "% peak BW", "% roofline"]
    headers += ["baseline", "base us", "speedup"] if has_base else []
    body = []
    for r in payload["rows"]:
        line = [r["name"], r["time_us"], r["bytes"] / 1e6, r["flops"] / 1e6, r["gbps"], r["tflops"] * 1e3,
                100 * r["bw_frac"], 100 * r["roofline_frac"]]
        line += [r.get("baseline"), r.get("baseline_time_us"), r.get("speedup")] if has_base else []
        body.append(line)
    title = (f"kernels on {payload['context']['device']} ({payload['implementation']} path, {payload['dtype']}); "
             f"peak {peak['name']}: {peak['hbm_gbps']:,.0f} GB/s, {peak['matrix_tflops']:,.3g} TFLOP/s ({peak['source']})")
    lines = [title, format_table(headers, body)]
    if payload["skipped_on_cpu"]:
        lines.append(f"skipped on CPU (over {CPU_MAX_FLOPS:.0e} FLOPs or {CPU_MAX_BYTES:.0e} bytes per call): "
                     + ", ".join(payload["skipped_on_cpu"]))
    lines += [f"ERROR {e['name']}: {e['error']}" for e in payload["errors"]]
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    record = run(args.family, args.dtype or default_dtype(), args.quick, args.out,
                 min(args.min_time, 0.02) if args.quick else args.min_time)
    print(table(record))
    print(f"wrote {args.out / 'kernels.json'} and {args.out / 'roofline.png'}")
    return 0 if record["rows"] and not record["errors"] else 1


def benchmark_case(benchmark, case: KernelCase, impl: str = "ascendtile") -> None:
    """pytest-benchmark adapter (bench/test_kernels.py): time our op (or, impl="torch_npu", the
    vendor baseline), grouped by case so both sit side by side, with bytes, FLOPs and the roofline
    metrics in extra_info. Each call synchronises the device so queued kernels are counted."""
    device = platform.default_device()
    fn = (case.baseline if impl == "torch_npu" else case.setup)(device)

    def call() -> None:
        fn()
        synchronize(device)

    benchmark.group = case.name
    benchmark.extra_info.update(op=case.op, impl=impl, shape=case.shape, bytes=case.bytes_moved, flops=case.flops)
    benchmark(call)
    if benchmark.stats is not None:  # None under --benchmark-disable (a single plain call)
        benchmark.extra_info.update(roofline_metrics(case.bytes_moved, case.flops, benchmark.stats.stats.median,
                                                     current_peak()))
