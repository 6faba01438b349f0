"""Microbenchmarks: silu_and_mul, gelu_tanh_and_mul (cases: ascendkit/bench/cases/activation.py)."""
from ascendkit.bench.kernels import benchmark_case

FAMILY = "activation"


def test_activation(benchmark, kernel_case, impl):
    benchmark_case(benchmark, kernel_case, impl)
