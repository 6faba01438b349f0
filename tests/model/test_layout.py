"""ascendkit.model's parts import one way (loading -> architectures -> layers; tokenizers only
each other), counting every import statement, and the registry lists every architecture class."""
import ast
import importlib
import inspect
from pathlib import Path

import ascendkit.model
from ascendkit.model.architectures.base import CausalLM
from ascendkit.model.architectures.registry import ARCHITECTURES

ROOT = Path(ascendkit.model.__file__).parent
# part -> the other parts of ascendkit.model its modules may import
ALLOWED = {
    "attention_metadata": set(),
    "layers": {"attention_metadata"},
    "architectures": {"layers", "attention_metadata"},
    "tokenizers": set(),
    "loading": {"architectures", "layers", "tokenizers", "attention_metadata"},
    "__init__": {"architectures", "attention_metadata", "loading", "tokenizers"},
}


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 else "__init__"


def _imports(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative import"
            yield node.module


def test_parts_import_one_way():
    wrong = []
    for path in sorted(ROOT.rglob("*.py")):
        source = _part(".".join(path.relative_to(ROOT.parent.parent).with_suffix("").parts))
        for target in _imports(path):
            inside = target == "ascendkit.model" or target.startswith("ascendkit.model.")
            if inside and _part(target) not in ALLOWED[source] | {source}:
                wrong.append(f"{path.relative_to(ROOT)}: {source} imports {target}")
    assert not wrong, "\n".join(wrong)


def test_registry_lists_every_architecture_class():
    """Adding an architecture is its file in architectures/ plus its registry line: a class
    that is defined there but not registered is a forgotten line."""
    registered = set(ARCHITECTURES.values())
    for path in sorted((ROOT / "architectures").glob("*.py")):
        module = importlib.import_module(f"ascendkit.model.architectures.{path.stem}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, CausalLM) and cls is not CausalLM and cls.__module__ == module.__name__:
                assert cls in registered, f"{cls.__name__} ({path.name}) is not in registry.ARCHITECTURES"
    assert all(cls.family for cls in registered)
