"""Microbenchmarks: the quant family (cases: ascendkit/bench/cases/quant.py)."""
from ascendkit.bench.kernels import benchmark_case

FAMILY = "quant"


def test_quant(benchmark, kernel_case, impl):
    benchmark_case(benchmark, kernel_case, impl)
