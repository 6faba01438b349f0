"""Output shared by the benchmarks: a plain-text table and a JSON file with the run's context."""
from __future__ import annotations

import json
import platform as host
import time
from pathlib import Path

import torch

from ascendtile import platform


def format_table(headers: list[str], rows: list[list[object]]) -> str:
    """Right-aligned columns (left-aligned first column); floats get 3 significant digits."""
    def cell(value: object) -> str:
        if isinstance(value, float):
            return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
        return "-" if value is None else str(value)

    text = [[cell(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in text)) for i, h in enumerate(headers)] if text else [len(h) for h in headers]
    fmt = lambda cols: "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cols, widths)))  # noqa: E731
    return "\n".join([fmt(headers), "  ".join("-" * w for w in widths), *(fmt(r) for r in text)])


def context() -> dict[str, object]:
    """Where and when a result was measured, stored beside every result."""
    return {
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "device": platform.device_kind(),
        "host": host.processor() or host.machine(),
        "cpu_threads": torch.get_num_threads(),
        "torch": torch.__version__,
    }


def write_json(path: Path, payload: dict) -> dict:
    """Write payload with the run's context to path; return what was written."""
    record = {"context": context(), **payload}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2, default=str) + "\n")
    return record
