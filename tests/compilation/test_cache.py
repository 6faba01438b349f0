"""The on-disk compile cache. Inductor's FX graph cache holds level 3's pieces, whose weights are
inputs; level 2's CPU graph has its weights frozen in and bypasses the cache (test_freezing.py).
Two processes compile the tiny Llama at level 3 with the same cache_dir: the first misses for its
pieces and fills the directory, the second hits for every piece (torch's own counters; no timing
is asserted). A cached graph is never reused with other weights: a model of the same shape with
other weights, compiled after the first in the same cache_dir, hits the cache and gives its own
eager logits."""
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
from torch._dynamo.utils import counters

from ascendtile.compilation import CompilationConfig, compile_model
from ascendtile.model import load_model
from compilation import tiny

TESTS = Path(__file__).resolve().parents[1]
SCRIPT = """
import json, sys
from torch._dynamo.utils import counters
from ascendtile.compilation import CompilationConfig, compile_model
from ascendtile.model import load_model
from compilation import tiny
model = load_model(tiny.save(sys.argv[1])).model
compiled = compile_model(model, CompilationConfig(level=3, cache_dir=sys.argv[2]))
tiny.run_steps(model, compiled)
print(json.dumps(dict(counters["inductor"], pieces=len(compiled.backend.splits[0].pieces))))
"""


def _compile_in_a_process(model_dir: Path, cache_dir: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS.parent), str(TESTS)]))
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)  # only the config may point Inductor at the cache
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(model_dir), str(cache_dir)], env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return Counter(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.mark.slow  # two Inductor compiles of the tiny model's pieces in fresh processes
def test_second_process_hits_the_fx_graph_cache(tmp_path):
    cache_dir = tmp_path / "cache"
    first = _compile_in_a_process(tmp_path / "model", cache_dir)
    assert first["pieces"] == 3 and first["fxgraph_cache_miss"] == 3
    assert not first["fxgraph_cache_hit"] and not first["fxgraph_cache_bypass"]
    assert not first["mkldnn_linear_weight_pack_matcher_count"]  # level 3's pieces are not frozen
    assert (cache_dir / "fxgraph").is_dir()
    second = _compile_in_a_process(tmp_path / "model", cache_dir)
    assert second["fxgraph_cache_hit"] == 3 and not second["fxgraph_cache_miss"]


@pytest.mark.slow  # one Inductor compile of the tiny model's pieces, then the same pieces read back
def test_cached_graph_is_not_reused_for_other_weights(tmp_path):
    config = CompilationConfig(level=3, cache_dir=str(tmp_path / "cache"))
    first = load_model(tiny.save(tmp_path / "first", seed=0)).model
    tiny.run_steps(first, compile_model(first, config))
    torch._dynamo.reset()  # the second model is traced afresh, as in a new process
    second = load_model(tiny.save(tmp_path / "second", seed=1)).model
    eager = tiny.run_steps(second)
    assert not torch.equal(eager[0], tiny.run_steps(first)[0])  # other weights: other logits
    hits = counters["inductor"]["fxgraph_cache_hit"]
    compiled = tiny.run_steps(second, compile_model(second, config))
    assert counters["inductor"]["fxgraph_cache_hit"] - hits == 3  # every piece came from the cache
    for got, want in zip(compiled, eager):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
