"""Microbenchmarks: the mask family (cases: ascendkit/bench/cases/mask.py)."""
from ascendkit.bench.kernels import benchmark_case

FAMILY = "mask"


def test_mask(benchmark, kernel_case, impl):
    benchmark_case(benchmark, kernel_case, impl)
