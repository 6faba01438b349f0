"""Microbenchmarks: the mla family (cases: ascendkit/bench/cases/mla.py)."""
from ascendkit.bench.kernels import benchmark_case

FAMILY = "mla"


def test_mla(benchmark, kernel_case, impl):
    benchmark_case(benchmark, kernel_case, impl)
