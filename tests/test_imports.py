"""Imports flow one way between ascendtile's packages (docs/architecture.md, module map):
cli -> bench -> runtime -> compilation -> model -> ops -> kernels (runtime also calls the
sampling ops), with lowering beside kernels, distributed (the tensor-parallel group and its
collectives) below model and cpu (C++ kernels of the CPU path) below compilation. Every import statement counts, including the lazy
ones inside functions, so no cycle can hide in a function."""
from pathlib import Path

import ascendtile
from import_graph import import_edges

ROOT = Path(ascendtile.__file__).parent
# package -> the ascendtile packages its modules may import (itself always allowed)
ALLOWED = {
    "platform": set(),
    "kernels": {"platform"},
    "ops": {"platform"},  # launchers are named as strings ("ascendtile.kernels.norm:rms_norm"), imported on first call
    "lowering": {"kernels", "platform"},
    "distributed": set(),
    "huge_pages": set(),  # madvise over CPU tensors' memory
    "model": {"distributed", "huge_pages", "ops", "platform"},
    "cpu": set(),  # C++ kernels of the CPU path, built and loaded on their own
    "compilation": {"cpu", "model", "ops", "platform"},  # passes name ops; decomposition reads ops/reference and cpu
    # ops: the sampler's sampling family; distributed: tensor-parallel ranks join the group, agree on the KV blocks
    "runtime": {"compilation", "distributed", "model", "ops", "platform"},
    "bench": {"runtime", "compilation", "huge_pages", "model", "ops", "kernels", "lowering", "platform"},
    "cli": {"bench", "runtime", "compilation", "model", "ops", "lowering", "platform"},
    "integrations": {"ops"},  # other engines (vLLM) on the public ops only
    "__init__": {"ops", "runtime"},
}


def test_every_package_is_known():
    packages = {p.stem if p.is_file() else p.name for p in ROOT.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()}
    assert packages <= set(ALLOWED), sorted(packages - set(ALLOWED))


def test_imports_flow_one_way():
    wrong = sorted(f"{where}: {src} imports {dst}" for src, dst, where in import_edges("ascendtile") if dst not in ALLOWED[src])
    assert not wrong, "\n".join(wrong)


def test_allowed_graph_has_no_cycle():
    seen, done = set(), set()

    def visit(node, path):
        assert node not in seen or node in done, f"import cycle: {' -> '.join(path + [node])}"
        if node in done:
            return
        seen.add(node)
        for nxt in ALLOWED[node]:
            visit(nxt, path + [node])
        done.add(node)

    for package in ALLOWED:
        visit(package, [])


def test_the_scan_sees_lazy_imports():
    # runtime/llm.py imports the model inside LLM.__init__; the scan must see edges like that one
    edges = {(src, dst) for src, dst, _ in import_edges("ascendtile")}
    assert ("runtime", "model") in edges and ("model", "ops") in edges and ("lowering", "kernels") in edges


def test_integrations_use_only_the_public_ops():
    # `ascendtile.ops` (the public wrappers, which register torch.ops.ascend) and nothing below it
    from import_graph import imported

    wrong = sorted(f"{path.relative_to(ROOT)}: {target}" for path in (ROOT / "integrations").rglob("*.py")
                   for target in imported(path) if target.startswith("ascendtile.")
                   and target != "ascendtile.ops" and not target.startswith("ascendtile.integrations."))
    assert not wrong, "\n".join(wrong)
