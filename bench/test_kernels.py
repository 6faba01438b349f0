"""Microbenchmarks of every op family (cases: ascendtile/bench/cases/<family>.py), parametrized by
bench/conftest.py; `-k <family>` or `-k <op>` selects."""
from ascendtile.bench.kernels import benchmark_case


def test_kernel(benchmark, kernel_case, impl):
    benchmark_case(benchmark, kernel_case, impl)
