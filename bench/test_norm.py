"""Microbenchmarks: rms_norm, fused_add_rms_norm (cases: ascendkit/bench/cases/norm.py)."""
from ascendkit.bench.kernels import benchmark_case

FAMILY = "norm"


def test_norm(benchmark, kernel_case, impl):
    benchmark_case(benchmark, kernel_case, impl)
