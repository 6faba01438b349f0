"""The gate's kernels compiled for an NVIDIA GPU by upstream triton, on this CPU (upstream triton
ships ptxas: no GPU is needed). Upstream triton refuses kernel code that triton-ascend 3.2 and its
interpreter accept, such as @jit code reading a module global that is not a `tl.constexpr` (the
first GPU run's 264 failures: bench/results/2026-11-26-cuda-kernel-suite.md). What it refuses is
the code, whatever the shapes, so one case per kernel function is compiled. Runs only where
upstream triton is installed (here the vLLM venv: tests/lowering/test_cuda_target.py), never
beside triton-ascend."""
from __future__ import annotations

import argparse
import json
import sys

from ascendtile.lowering.case import LoweringCase, signature
from ascendtile.lowering.cases import all_cases, cases_of

ARCH = 90  # sm_90, the H100 / H200 the GPU runs used


def one_case_per_kernel(cases: list[LoweringCase]) -> list[LoweringCase]:
    """The first case of each kernel function, in order."""
    first: dict[object, LoweringCase] = {}
    for case in cases:
        first.setdefault(case.kernel.fn, case)
    return list(first.values())


def compile_error(case: LoweringCase) -> str | None:
    """None when upstream triton compiles the case to a cubin for sm_ARCH; else its error."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    try:
        triton.compile(ASTSource(case.kernel, signature(case), dict(case.constexprs)),
                       target=GPUTarget("cuda", ARCH, 32))
    except Exception as error:  # the front end's and the backend's errors share no base class
        return f"{type(error).__name__}: {error}"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Compile one case of every kernel for an NVIDIA GPU "
                                                 "(upstream triton, no GPU needed); prints JSON name -> error.")
    parser.add_argument("--cases", action="append", help="MODULE:FUNCTION returning LoweringCases "
                                                         "(repeatable; default: every family's)")
    args = parser.parse_args(argv)
    cases = [case for target in args.cases for case in cases_of(target)] if args.cases else all_cases()
    errors = {case.name: compile_error(case) for case in one_case_per_kernel(cases)}
    print(json.dumps(errors))
    return 0 if not any(errors.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
