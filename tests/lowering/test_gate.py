"""The Ascend lowering gate: every kernel family's case lowers for Ascend910B4 through
triton-ascend's front end and triton-adapter-opt, in the expected core mode, with no
element-granular gather and an on-chip estimate within the UB budget."""
import pytest

from ascendkit.kernels import KERNEL_MODULES
from ascendkit.lowering import cases as lowering_cases
from ascendkit.lowering.frontend import inspect_lowered
from ascendkit.lowering.gate import UB_BUDGET_BYTES, run_gate

pytestmark = pytest.mark.xdist_group("ascend_gate")


@pytest.fixture(scope="module")
def reports():
    return {r.name: r for r in run_gate()}


def test_every_kernel_family_has_cases(reports):
    # one gate run covers every family: the case count equals the sum over the families' modules
    assert len(KERNEL_MODULES) >= 11
    assert len(reports) == sum(len(lowering_cases.family_cases(f)) for f in KERNEL_MODULES)
    assert {"rms_norm", "fused_add_rms_norm", "silu_and_mul", "gelu_tanh_and_mul"} <= {n.split("[")[0] for n in reports}


def test_a_family_without_cases_is_refused(monkeypatch):
    monkeypatch.setattr(lowering_cases, "KERNEL_MODULES", (*KERNEL_MODULES, "no_such_family"))
    with pytest.raises(RuntimeError, match="no ascendkit/lowering/cases/no_such_family.py"):
        lowering_cases.all_cases()
    with pytest.raises(ValueError, match="^families: unknown kernel families"):
        lowering_cases.all_cases(["nope"])


def test_all_cases_lower_without_hazards(reports):
    failed = {name: r.hazards for name, r in reports.items() if not r.passed}
    assert not failed, failed


def test_norm_and_activation_are_vector_kernels(reports):
    for name, r in reports.items():
        if name.startswith(("rms_norm", "fused_add_rms_norm", "silu_and_mul", "gelu_tanh_and_mul")):
            assert r.mix_mode == "aiv", name


def test_inspector_flags_hazards():
    # A synthetic lowered module: an element gather and a 128 KB buffer must both be caught.
    ir_text = """
    func.func @k() attributes {mix_mode = "mix"} {
      %a = memref.alloc() : memref<256x128xf32>
      %t = tensor.empty() : tensor<16xf16>
      %x = tensor.extract %2[%i] {DiscreteMemAccess} : tensor<16xi32>
      scf.yield {DiscreteMemAccess} %inserted : tensor<16xf16>
    }"""
    found = inspect_lowered(ir_text)
    assert found == {"mix_mode": "mix", "discrete_sites": 1, "element_gathers": 1,
                     "alloc_bytes": 256 * 128 * 4, "intermediate_bytes": 32}
    assert found["alloc_bytes"] > UB_BUDGET_BYTES


def test_attention_kernels_move_whole_tiles(reports):
    attention = {n: r for n, r in reports.items()
                 if n.startswith(("unified_attention", "flash_attention_varlen", "paged_attention"))}
    assert {n.split("[")[0] for n in attention} == {
        "unified_attention", "flash_attention_varlen", "paged_attention", "paged_attention_reduce"}
    for name, r in attention.items():
        assert r.discrete_sites == 0, name  # K/V (and Q/out) move as whole tiles, never row gathers
        assert r.mix_mode == ("aiv" if name.startswith("paged_attention_reduce") else "mix"), name
