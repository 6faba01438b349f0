"""Upstream triton, in the vLLM venv (never beside triton-ascend), compiles one case of every
kernel for sm_90 on this CPU, and refuses the positive control (a @jit read of a plain module
global): what the first GPU run found, kept from coming back in a suite that has no GPU."""
import json
import os
import subprocess

from ascendtile.lowering.cases import all_cases
from ascendtile.lowering.cuda_target import one_case_per_kernel
from vllm_venv import REPO, vllm_venv

CONTROL = "lowering.cuda_controls:cases"


def test_every_kernel_compiles_for_cuda_and_the_control_does_not(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path)  # compiled afresh, and not into the user's ~/.triton
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "tests")])
    env["TRITON_DEFAULT_FP_FUSION"] = "1"  # triton 3.9 warns while the default is unset; 1 is today's
    done = subprocess.run([str(vllm_venv() / "bin" / "python"), "-m", "ascendtile.lowering.cuda_target",
                           "--cases", "ascendtile.lowering.cases:all_cases", "--cases", CONTROL],
                          env=env, capture_output=True, text=True, timeout=600)
    errors = json.loads(done.stdout.strip().splitlines()[-1])
    kernels = [case.name for case in one_case_per_kernel(all_cases())]
    assert list(errors) == [*kernels, "reads_plain_global"]  # every kernel function once, then the control
    assert {name: error for name, error in errors.items() if error and name != "reads_plain_global"} == {}
    assert "PLAIN_MODE" in errors["reads_plain_global"] and "constexpr" in errors["reads_plain_global"]
    assert done.returncode == 1  # the control's failure
