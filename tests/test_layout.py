"""One vocabulary of op families: every module of ascendtile/kernels/ whose name does not start with
'_' (ascendtile.kernels.KERNEL_MODULES) names a family, and each layer has a file of that stem, so
everything about an op is found by its family name. Modules starting with '_' are helpers shared
within a layer. An op is registered in ascendtile/ops/<family>.py, launches a Triton function of
ascendtile/kernels/<family>.py and has a benchmark case of the same family."""
from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import torch

import ascendtile
from ascendtile.bench.cases import all_cases
from ascendtile.kernels import KERNEL_MODULES
from ascendtile.ops._registry import OP_INFO, REGISTERED

REPO = Path(ascendtile.__file__).resolve().parents[1]
FAMILIES = sorted(KERNEL_MODULES)
# layer -> where a family's file lives ({} = the family); ascendtile/kernels/ defines the families.
LAYERS = {
    "ops": "ascendtile/ops/{}.py",
    "references": "ascendtile/ops/reference/{}.py",
    "lowering_cases": "ascendtile/lowering/cases/{}.py",
    "kernel_tests": "tests/kernels/test_{}.py",
    "op_tests": "tests/ops/test_{}.py",
    "bench_cases": "ascendtile/bench/cases/{}.py",
}


def layer_problems(root: Path, pattern: str, families: list[str]) -> list[str]:
    """The family files missing from one layer, and its modules that name no family."""
    problems = [f"{pattern.format(f)} is missing (family {f})" for f in families
                if not (root / pattern.format(f)).is_file()]
    folder, _, file_pattern = pattern.rpartition("/")
    prefix, suffix = file_pattern.split("{}")
    for path in sorted((root / folder).glob(file_pattern.format("*"))):
        stem = path.name[len(prefix):-len(suffix)]
        if stem not in families and not stem.startswith("_"):
            problems.append(f"{folder}/{path.name} names no family (families: {', '.join(families)}; "
                            "a helper shared within the layer starts with '_')")
    return problems


@pytest.mark.parametrize("layer", list(LAYERS))
def test_every_family_has_a_file_in_every_layer(layer):
    problems = layer_problems(REPO, LAYERS[layer], FAMILIES)
    assert not problems, f"{layer}:\n" + "\n".join(problems)


def test_layer_check_names_missing_and_stray_files(tmp_path):
    for family in ("norm", "rope"):
        (tmp_path / LAYERS["op_tests"].format(family)).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / LAYERS["op_tests"].format(family)).touch()
    assert layer_problems(tmp_path, LAYERS["op_tests"], ["norm", "rope"]) == []
    (tmp_path / "tests/ops/test_rope.py").unlink()
    (tmp_path / "tests/ops/test_norm_rope.py").touch()
    (tmp_path / "tests/ops/_helpers.py").touch()
    problems = layer_problems(tmp_path, LAYERS["op_tests"], ["norm", "rope"])
    assert len(problems) == 2, problems
    assert problems[0] == "tests/ops/test_rope.py is missing (family rope)"
    assert problems[1].startswith("tests/ops/test_norm_rope.py names no family")


def test_every_op_is_declared_and_launched_in_its_family():
    problems = []
    for name in sorted(REGISTERED):
        info = OP_INFO[name]
        package, _, family = info.module.rpartition(".")
        if package != "ascendtile.ops" or family not in FAMILIES:
            problems.append(f"{name}: registered in {info.module}, not in ascendtile/ops/<family>.py")
            continue
        module_name, _, attr = info.triton.partition(":")
        if module_name != f"ascendtile.kernels.{family}":
            problems.append(f"{name}: registered in ascendtile/ops/{family}.py but launches {info.triton}")
        elif not callable(getattr(importlib.import_module(module_name), attr, None)):
            problems.append(f"{name}: {info.triton} does not resolve to a function")
    assert not problems, "\n".join(problems)


def test_every_family_and_op_has_a_benchmark_case():
    problems = []
    op_families = {}
    for family in FAMILIES:
        try:
            cases = all_cases(torch.float32, quick=True, only=[family])
        except ValueError:
            cases = []
        if not cases:
            problems.append(f"family {family}: no @bench_cases(\"{family}\") producer with cases in "
                            f"ascendtile/bench/cases/{family}.py")
        for case in cases:
            op_families.setdefault(case.op, set()).add(case.family)
    for name in sorted(REGISTERED):
        family = OP_INFO[name].module.rpartition(".")[2]
        if name not in op_families:
            problems.append(f"{name}: no case in ascendtile/bench/cases/{family}.py")
        elif op_families[name] != {family}:
            problems.append(f"{name}: cases in families {sorted(op_families[name])}, not only {family}")
    assert not problems, "\n".join(problems)
