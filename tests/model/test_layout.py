"""ascendtile.model's parts import one way (loading -> architectures -> layers; tokenizers only
each other), counting every import statement, and the registry lists every architecture class."""
import importlib
import inspect
from pathlib import Path

import ascendtile.model
from ascendtile.model.architectures.base import CausalLM
from ascendtile.model.architectures.registry import ARCHITECTURES
from import_graph import import_edges

ROOT = Path(ascendtile.model.__file__).parent
# part -> the other parts of ascendtile.model its modules may import
ALLOWED = {
    "attention_metadata": set(),
    "layers": {"attention_metadata"},
    "architectures": {"layers", "attention_metadata"},
    "tokenizers": set(),
    "loading": {"architectures", "layers", "tokenizers", "attention_metadata"},
    "__init__": {"architectures", "attention_metadata", "loading", "tokenizers"},
}


def test_parts_import_one_way():
    wrong = sorted(f"{where}: {src} imports {dst}" for src, dst, where in import_edges("ascendtile.model")
                   if dst not in ALLOWED[src])
    assert not wrong, "\n".join(wrong)


def test_registry_lists_every_architecture_class():
    """Adding an architecture is its file in architectures/ plus its registry line: a class
    that is defined there but not registered is a forgotten line."""
    registered = set(ARCHITECTURES.values())
    for path in sorted((ROOT / "architectures").glob("*.py")):
        module = importlib.import_module(f"ascendtile.model.architectures.{path.stem}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, CausalLM) and cls is not CausalLM and cls.__module__ == module.__name__:
                assert cls in registered, f"{cls.__name__} ({path.name}) is not in registry.ARCHITECTURES"
    assert all(cls.family for cls in registered)
