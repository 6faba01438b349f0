"""Microbenchmarks: the kv_cache family (cases: ascendkit/bench/cases/kv_cache.py)."""
from ascendkit.bench.kernels import benchmark_case

FAMILY = "kv_cache"


def test_kv_cache(benchmark, kernel_case, impl):
    benchmark_case(benchmark, kernel_case, impl)
