"""Microbenchmarks: the rope family (cases: ascendkit/bench/cases/rope.py)."""
from ascendkit.bench.kernels import benchmark_case

FAMILY = "rope"


def test_rope(benchmark, kernel_case, impl):
    benchmark_case(benchmark, kernel_case, impl)
