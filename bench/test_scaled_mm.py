"""Microbenchmarks: the scaled_mm family (cases: ascendkit/bench/cases/scaled_mm.py)."""
from ascendkit.bench.kernels import benchmark_case

FAMILY = "scaled_mm"


def test_scaled_mm(benchmark, kernel_case, impl):
    benchmark_case(benchmark, kernel_case, impl)
