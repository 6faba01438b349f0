"""`from ascendtile import LLM, SamplingParams` works (vLLM's habit) while `import ascendtile` stays
light: the runtime loads on first use of one of those names."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import ascendtile
from ascendtile import runtime

HEAVY = ("ascendtile.runtime", "ascendtile.model", "transformers", "tqdm")  # packages


def _fresh(code: str) -> object:
    """Run code in a new interpreter importing this same ascendtile; its last line of output, as JSON."""
    root = str(Path(ascendtile.__file__).parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, check=True,
                         env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_ascendtile_does_not_load_the_runtime():
    # torch itself imports tqdm (torch.hub): count only what `import ascendtile` adds after torch
    added = _fresh("""
        import json, sys
        import torch
        before = set(sys.modules)
        import ascendtile
        print(json.dumps(sorted(set(sys.modules) - before)))
    """)
    assert [m for m in added if any(m == p or m.startswith(p + ".") for p in HEAVY)] == []
    assert "ascendtile.ops" in added


def test_from_ascendtile_import_llm_and_sampling_params(tmp_path):
    """...and generating at level 0 (the default) loads no Dynamo (1.6 s of a CLI run's imports):
    not with the runtime, not while prepacking weights for oneDNN (all 4 linears of the layer are
    above the bound)."""
    from transformers import LlamaConfig

    from model.helpers import save_tiny

    save_tiny(LlamaConfig(vocab_size=128, hidden_size=512, intermediate_size=1024, num_hidden_layers=1,
                          num_attention_heads=4, num_key_value_heads=2), tmp_path)
    loaded = _fresh(f"""
        import json, sys
        from ascendtile import LLM, SamplingParams
        from ascendtile.model.layers.linear import Linear
        llm = LLM({str(tmp_path)!r}, max_model_len=64, max_num_seqs=1)
        out = llm.generate([[5, 6, 7]], SamplingParams(temperature=0, max_tokens=2), use_tqdm=False)
        packed = sum(m.packed is not None for m in llm.engine.model.modules() if isinstance(m, Linear))
        print(json.dumps([LLM.__module__, SamplingParams.__module__, "ascendtile.runtime.llm" in sys.modules,
                          len(out[0].outputs[0].token_ids), packed, "torch._dynamo" in sys.modules]))
    """)
    assert loaded == ["ascendtile.runtime.llm", "ascendtile.runtime.sampling_params", True, 2, 4, False]


@pytest.mark.parametrize("name", ["LLM", "SamplingParams", "RequestOutput", "CompletionOutput"])
def test_top_level_names_are_the_runtimes(name):
    assert getattr(ascendtile, name) is getattr(runtime, name)
    assert name in dir(ascendtile)


def test_unknown_attribute_and_submodules():
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        ascendtile.nope  # noqa: B018
    from ascendtile import platform  # submodules still import through the package

    assert platform.__name__ == "ascendtile.platform"
