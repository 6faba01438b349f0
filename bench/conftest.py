"""pytest-benchmark microbenchmarks (bench/test_kernels.py). A test taking a `kernel_case` argument
is parametrized over the real-shape cases of every op family (ascendtile/bench/cases/<family>.py;
a test module may name FAMILIES to take only those), ids "<family>/<case>-<impl>", and `impl` over
ascendtile and, on NPU, the torch_npu baseline.

  pytest bench --benchmark-json=bench/out/pytest-benchmark.json    # the full grid
  ASCENDTILE_BENCH_QUICK=1 pytest bench --benchmark-disable             # one tiny shape, one call
ASCENDTILE_BENCH_DTYPE=fp16|bf16|fp32 overrides the dtype (default fp32 on CPU, bf16 on devices).
"""
import os

import pytest

from ascendtile import platform
from ascendtile.bench.cases import all_cases, fits_cpu
from ascendtile.bench.kernels import DTYPES, default_dtype


def pytest_generate_tests(metafunc):
    if "kernel_case" not in metafunc.fixturenames:
        return
    dtype = DTYPES[os.environ.get("ASCENDTILE_BENCH_DTYPE") or default_dtype()]
    quick = os.environ.get("ASCENDTILE_BENCH_QUICK", "0") == "1"
    on_npu = platform.device_kind() == "npu"
    on_cpu = platform.device_kind() == "cpu"
    params, ids = [], []
    for case in all_cases(dtype, quick, getattr(metafunc.module, "FAMILIES", None)):
        too_big = pytest.mark.skip(reason="too much work for the CPU reference path") if on_cpu and not fits_cpu(case) else ()
        for impl in ("ascendtile", "torch_npu") if on_npu and case.baseline else ("ascendtile",):
            params.append(pytest.param(case, impl, marks=too_big))
            ids.append(f"{case.family}/{case.name}-{impl}")
    metafunc.parametrize(("kernel_case", "impl"), params, ids=ids)
