"""The Ascend gate: every kernel family's case goes through both compiler stages that run on this
CPU (triton-ascend's front end to Linalg, then bishengir-compile's HFusion/HIVM pipeline up to the
hivmc hand-off), in the expected core mode, with no element-granular gather or scatter, no
masked store turned read-modify-write, multibuffering kept and planned UB <= 160 KB."""
import pytest

from ascendtile.kernels import KERNEL_MODULES
from ascendtile.lowering import cases as lowering_cases
from ascendtile.lowering.frontend import inspect_lowered
from ascendtile.lowering.gate import UB_LIMIT_BYTES, run_gate
from ascendtile.lowering.hivm import planned_bytes, static_cost
from lowering.controls import EXPECTED

pytestmark = [pytest.mark.xdist_group("ascend_gate"), pytest.mark.slow]


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
    with pytest.raises(RuntimeError, match="no ascendtile/lowering/cases/no_such_family.py"):
        lowering_cases.all_cases()
    with pytest.raises(ValueError, match="^families: unknown kernel families"):
        lowering_cases.all_cases(["nope"])


def test_all_cases_pass_both_stages(reports):
    failed = {name: r.hazards for name, r in reports.items() if not r.passed}
    assert not failed, failed
    for name, r in reports.items():
        assert r.hivm_ok and 0 < r.ub_bytes <= UB_LIMIT_BYTES, (name, r.ub_bytes)
        assert (r.l1_bytes > 0 and r.l0c_bytes > 0) == (r.mix_mode == "mix"), name  # cube buffers only with tl.dot


def test_norm_and_activation_are_vector_kernels(reports):
    for name, r in reports.items():
        if name.startswith(("rms_norm", "fused_add_rms_norm", "silu_and_mul", "gelu_tanh_and_mul", "gelu_and_mul")):
            assert r.mix_mode == "aiv", name


def test_attention_kernels_move_whole_tiles(reports):
    attention = {n: r for n, r in reports.items()
                 if n.startswith(("unified_attention", "flash_attention_varlen", "paged_attention"))}
    assert {n.split("[")[0] for n in attention} == {
        "unified_attention", "flash_attention_varlen", "paged_attention", "paged_attention_reduce"}
    for name, r in attention.items():
        assert r.discrete_sites == 0, name  # K/V (and Q/out) move as whole tiles, never row gathers
        assert r.mix_mode == ("aiv" if name.startswith("paged_attention_reduce") else "mix"), name
        if r.mix_mode == "mix":
            assert r.cube_vector_syncs > 0, name  # dot -> softmax -> dot hand-offs are counted
            # visibility masks compare fp32 positions: integer vector compares are scalar code on A2/A3
            assert r.int_compares <= 1, (name, r.int_compares)
    mla = [r for n, r in reports.items() if n.startswith("mla_attention")]
    assert mla and all(r.int_compares == 0 for r in mla)


def test_positive_controls_fail_for_their_reason():
    reports = {r.name: r for r in run_gate(cases_from="lowering.controls:cases")}
    assert set(reports) == set(EXPECTED)
    for name, reason in EXPECTED.items():
        hazards = " | ".join(reports[name].hazards)
        assert reason in hazards, (name, hazards)
        assert len(reports[name].hazards) <= 2, (name, hazards)  # only its own hazard (+ the overflow retry note)


def test_inspector_reads_linalg_hazards():
    ir_text = """
    func.func @k() attributes {mix_mode = "mix"} {
      %x = tensor.extract %2[%i] {DiscreteMemAccess} : tensor<16xi32>
      scf.for %a = %c0 to %c16 step %c1 {
        scf.yield {DiscreteMemAccess} %inserted : tensor<16xf16>
      } {ExtractedLoadOrStore}
      scf.for %b = %c0 to %c16 step %c1 {
        bufferization.materialize_in_destination %inserted in writable %rc_2 : (tensor<1xf16>, memref<1xf16>) -> ()
      } {ExtractedLoadOrStore}
      memref.copy %rc_1, %alloc_2 : memref<64x64xf16> to memref<64x64xf16>
      %5 = bufferization.to_tensor %alloc_2 restrict writable : memref<64x64xf16>
      %6 = arith.select %4, %3, %5 : tensor<64x64xi1>, tensor<64x64xf16>
      bufferization.materialize_in_destination %6 in writable %rc_1 : (tensor<64x64xf16>, memref<64x64xf16>) -> ()
      %7 = arith.addf %5, %5 : tensor<64x64xf16>
      bufferization.materialize_in_destination %7 in writable %rc_1 : (tensor<64x64xf16>, memref<64x64xf16>) -> ()
    }"""
    assert inspect_lowered(ir_text) == {"mix_mode": "mix", "discrete_sites": 1, "element_gathers": 1,
                                        "element_scatters": 1, "rmw_stores": 1}


def test_memory_plan_units():
    # offsets are i64 constants in bytes; a multibuffered buffer is one cast per copy; global
    # memory (gm) is no on-chip plan
    ir = """
      %c0_i64 = arith.constant 0 : i64
      %c32_i64 = arith.constant 32 : i64
      %c131264_i64 = arith.constant 131264 : i64
      %c4096_i64 = arith.constant 4096 : i64
      %0 = hivm.hir.pointer_cast(%c32_i64) : memref<4096xf16, #hivm.address_space<ub>>
      %1 = hivm.hir.pointer_cast(%c131264_i64) : memref<4096xf16, #hivm.address_space<ub>>
      %2 = hivm.hir.pointer_cast(%c0_i64) : memref<8xi32, #hivm.address_space<ub>>
      %3 = hivm.hir.pointer_cast(%c0_i64) : memref<4x2x16xbf16, #hivm.address_space<cbuf>>
      %4 = hivm.hir.pointer_cast(%c0_i64) : memref<2x1x16x16xf32, #hivm.address_space<cc>>
      %5 = hivm.hir.pointer_cast(%c4096_i64) : memref<2x1x16x16xf32, #hivm.address_space<cc>>
      %6 = hivm.hir.pointer_cast(%c131264_i64) : memref<1048576xf32, #hivm.address_space<gm>>
    """
    assert planned_bytes(ir) == {"ub_bytes": 131264 + 8192, "l1_bytes": 256, "l0c_bytes": 4096 + 2048}
    # a buffer it cannot size (a dynamic dim, an offset it cannot resolve) fails rather than plan less
    for cast in ("hivm.hir.pointer_cast(%c0_i64) : memref<?xf16, #hivm.address_space<ub>>",
                 "hivm.hir.pointer_cast(%off) : memref<16xf16, #hivm.address_space<ub>>"):
        with pytest.raises(ValueError, match="planned buffer not understood"):
            planned_bytes("%c0_i64 = arith.constant 0 : i64\n" + cast)
    ir = ("hivm.hir.pipe_barrier\nhivm.hir.set_flag\nhivm.hir.wait_flag\nhivm.hir.sync_block_set\nhivm.hir.sync_block_wait\n"
          "call @vcmp_eq_1d_int32_t(%a)\ncall @vcmps_lt_2d_int64_t(%b)\ncall @vcmp_gt_1d_float(%c)")
    assert static_cost(ir) == {"pipe_barriers": 1, "sync_flags": 2, "cube_vector_syncs": 2, "int_compares": 2}


def test_check_ascend_command_and_the_plan_is_deterministic(reports):
    """`ascendtile check-ascend` as a table and as JSON; its second compile of a family, in another
    process, plans what the gate run planned."""
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    cmd = [sys.executable, "-m", "ascendtile.cli", "check-ascend", "--family", "mask"]
    table = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    assert table.returncode == 0, table.stderr[-2000:]
    assert "UB KB" in table.stdout and "L0C KB" in table.stdout and "12 passed, 0 failed" in table.stdout
    rows = json.loads(subprocess.run(cmd + ["--json"], env=env, capture_output=True, text=True, check=True).stdout)
    assert len(rows) == 12 and all(r["hivm_ok"] and r["ub_bytes"] > 0 for r in rows)
    assert [(r["name"], r["ub_bytes"], r["pipe_barriers"]) for r in rows] == \
        [(r["name"], reports[r["name"]].ub_bytes, reports[r["name"]].pipe_barriers) for r in rows]
