"""`from ascendkit import LLM, SamplingParams` works (vLLM's habit) while `import ascendkit` stays
light: the runtime loads on first use of one of those names."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import ascendkit
from ascendkit import runtime

HEAVY = ("ascendkit.runtime", "ascendkit.model", "transformers", "tqdm")  # packages


def _fresh(code: str) -> object:
    """Run code in a new interpreter importing this same ascendkit; its last line of output, as JSON."""
    root = str(Path(ascendkit.__file__).parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, check=True,
                         env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_ascendkit_does_not_load_the_runtime():
    # torch itself imports tqdm (torch.hub): count only what `import ascendkit` adds after torch
    added = _fresh("""
        import json, sys
        import torch
        before = set(sys.modules)
        import ascendkit
        print(json.dumps(sorted(set(sys.modules) - before)))
    """)
    assert [m for m in added if any(m == p or m.startswith(p + ".") for p in HEAVY)] == []
    assert "ascendkit.ops" in added


def test_from_ascendkit_import_llm_and_sampling_params():
    loaded = _fresh("""
        import json, sys
        from ascendkit import LLM, SamplingParams
        print(json.dumps([LLM.__module__, SamplingParams.__module__, "ascendkit.runtime.llm" in sys.modules]))
    """)
    assert loaded == ["ascendkit.runtime.llm", "ascendkit.runtime.sampling_params", True]


@pytest.mark.parametrize("name", ["LLM", "SamplingParams", "RequestOutput", "CompletionOutput"])
def test_top_level_names_are_the_runtimes(name):
    assert getattr(ascendkit, name) is getattr(runtime, name)
    assert name in dir(ascendkit)


def test_unknown_attribute_and_submodules():
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        ascendkit.nope  # noqa: B018
    from ascendkit import platform  # submodules still import through the package

    assert platform.__name__ == "ascendkit.platform"
