"""Microbenchmarks: the attention family (cases: ascendkit/bench/cases/attention.py)."""
from ascendkit.bench.kernels import benchmark_case

FAMILY = "attention"


def test_attention(benchmark, kernel_case, impl):
    benchmark_case(benchmark, kernel_case, impl)
