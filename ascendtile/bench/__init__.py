"""Benchmarks behind `ascendtile bench kernels | e2e | host`: kernel microbenchmarks with a
roofline report, end-to-end offline throughput against peers, and the runtime's host overhead.

Nothing here asserts timings; tests run each benchmark once in quick mode so it cannot rot."""
