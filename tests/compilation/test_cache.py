"""The on-disk compile cache: two processes compile the tiny Llama at level 2 with the same
cache_dir; the first misses Inductor's FX graph cache and fills the directory, the second hits it
(torch's own counters; no timing is asserted)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
SCRIPT = """
import json, sys
from torch._dynamo.utils import counters
from ascendkit.compilation import CompilationConfig, compile_model
from ascendkit.model import load_model
from compilation import tiny
model = load_model(tiny.save(sys.argv[1])).model
compiled = compile_model(model, CompilationConfig(level=2, cache_dir=sys.argv[2]))
tiny.run_steps(model, compiled)
print(json.dumps(dict(counters["inductor"])))
"""


def _compile_in_a_process(model_dir: Path, cache_dir: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS.parent), str(TESTS)]))
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)  # only the config may point Inductor at the cache
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(model_dir), str(cache_dir)], env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # two Inductor compiles of the tiny model in fresh processes
def test_second_process_hits_the_fx_graph_cache(tmp_path):
    cache_dir = tmp_path / "cache"
    first = _compile_in_a_process(tmp_path / "model", cache_dir)
    assert first.get("fxgraph_cache_miss", 0) >= 1 and not first.get("fxgraph_cache_hit")
    assert (cache_dir / "fxgraph").is_dir()
    second = _compile_in_a_process(tmp_path / "model", cache_dir)
    assert second.get("fxgraph_cache_hit", 0) >= 1 and not second.get("fxgraph_cache_miss")
