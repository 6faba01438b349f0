"""The import graph of an ascendtile package, read from the source: every import statement
counts, the lazy ones inside functions too, so no dependency can hide in a function body."""
import ast
import importlib
from pathlib import Path

import ascendtile

SOURCE_ROOT = Path(ascendtile.__file__).parent.parent


def _is_module(dotted: str) -> bool:
    path = SOURCE_ROOT.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imported(path: Path):
    """Dotted names a file imports; `from pkg import submodule` counts as the submodule."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative import"
            submodules = [f"{node.module}.{alias.name}" for alias in node.names]
            if all(_is_module(name) for name in submodules):
                yield from submodules
            else:
                yield node.module


def part(module: str, depth: int) -> str:
    """The part of `package` a module belongs to: its dotted name's component at `depth`
    (ascendtile.model.layers.norm at depth 2: layers); the package's own __init__ is "__init__"."""
    parts = module.split(".")
    return parts[depth] if len(parts) > depth and parts[depth] != "__init__" else "__init__"


def import_edges(package: str) -> set[tuple[str, str, str]]:
    """(source part, target part, file) for every import from one part of `package` into another."""
    depth = package.count(".") + 1
    root = Path(importlib.import_module(package).__file__).parent
    edges = set()
    for path in root.rglob("*.py"):
        source = part(".".join(path.relative_to(SOURCE_ROOT).with_suffix("").parts), depth)
        for target in imported(path):
            if (target == package or target.startswith(package + ".")) and part(target, depth) != source:
                edges.add((source, part(target, depth), str(path.relative_to(SOURCE_ROOT))))
    return edges
