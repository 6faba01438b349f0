"""The on-disk compile cache. Inductor's FX graph cache holds level 3's pieces, whose weights are
inputs; level 2's CPU graph has its weights frozen in and bypasses the cache (test_freezing.py).
This process compiles the tiny Llama at level 3 into an empty cache_dir, missing for each of its
pieces; then a fresh process compiling the same model with that cache_dir hits for every piece
(torch's own counters; no timing is asserted): the keys do not depend on how a process imported
torch (ascendtile/compilation/cache_key.py; without it, this pytest process's keys name its
conftest and the fresh process misses every piece). A cached graph is never reused with other
weights: a model of the same shape with other weights, compiled after the first in the same
cache_dir, hits the cache and gives its own eager logits."""
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
from ascendtile.compilation.config import default_cache_dir
from ascendtile.cpu import dispatch
from ascendtile.model import load_model
from compilation import tiny

# The compile tests read the cache the module's fixture fills: one worker runs them.
pytestmark = pytest.mark.xdist_group("compile_cache")

TESTS = Path(__file__).resolve().parents[1]
# Inductor's cache key holds torch's thread count (its C++ kernels are built for it), and pytest-xdist
# workers run fewer threads than a process started afresh: the fresh process takes this one's.
SCRIPT = """
import json, sys
import torch
from torch._dynamo.utils import counters
from ascendtile.compilation import CompilationConfig, compile_model
from ascendtile.model import load_model
from compilation import tiny
torch.set_num_threads(int(sys.argv[3]))
model = load_model(tiny.save(sys.argv[1])).model
compiled = compile_model(model, CompilationConfig(level=3, cache_dir=sys.argv[2]))
tiny.run_steps(model, compiled)
print(json.dumps(dict(counters["inductor"], pieces=len(compiled.backend.splits[0].pieces))))
"""


@pytest.fixture(scope="module")
def filled_cache(tmp_path_factory) -> Path:
    """A cache_dir holding the tiny Llama's (seed 0) level-3 pieces, compiled here with every piece a
    miss."""
    root = tmp_path_factory.mktemp("fx_cache")
    # as in a whole run, this process loads the CPU ops' library from its default cache_dir first
    assert dispatch.library(default_cache_dir()) is not None
    before = Counter(counters["inductor"])
    model = load_model(tiny.save(root / "model", seed=0)).model
    compiled = compile_model(model, CompilationConfig(level=3, cache_dir=str(root / "cache")))
    tiny.run_steps(model, compiled)
    compiled_here = Counter(counters["inductor"]) - before
    assert len(compiled.backend.splits[0].pieces) == 3 and compiled_here["fxgraph_cache_miss"] == 3
    assert not compiled_here["fxgraph_cache_hit"] and not compiled_here["fxgraph_cache_bypass"]
    assert not compiled_here["mkldnn_linear_weight_pack_matcher_count"]  # level 3's pieces are not frozen
    assert (root / "cache" / "fxgraph").is_dir()
    return root


@pytest.mark.slow  # the fixture's Inductor compile, then a fresh process reading its pieces back
def test_second_process_hits_the_fx_graph_cache(filled_cache):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS.parent), str(TESTS)]))
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)  # only the config may point Inductor at the cache
    libraries = filled_cache / "cache" / "cpu"
    held = set(libraries.glob("*.so"))
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(filled_cache / "model"), str(filled_cache / "cache"),
                           str(torch.get_num_threads())], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    second = Counter(json.loads(done.stdout.strip().splitlines()[-1]))
    assert second["pieces"] == 3 and second["fxgraph_cache_hit"] == 3 and not second["fxgraph_cache_miss"]
    # nor does it build the CPU ops' library: the cache_dir holds it too, although this process had
    # loaded it from another cache_dir first (cpu/dispatch.py). (A kernel library may be built: one
    # whose variants this process had loaded from another cache_dir is a library of other variants.)
    assert not [p.name for p in set(libraries.glob("*.so")) - held if p.name.startswith("dispatch-")]


@pytest.mark.slow  # the fixture's Inductor compile, then the same pieces read back for other weights
def test_cached_graph_is_not_reused_for_other_weights(filled_cache, tmp_path):
    first = load_model(str(filled_cache / "model")).model
    second = load_model(tiny.save(tmp_path / "second", seed=1)).model
    eager = tiny.run_steps(second)
    assert not torch.equal(eager[0], tiny.run_steps(first)[0])  # other weights: other logits
    torch._dynamo.reset()  # the second model is traced afresh, as in a new process
    hits = counters["inductor"]["fxgraph_cache_hit"]
    config = CompilationConfig(level=3, cache_dir=str(filled_cache / "cache"))
    compiled = tiny.run_steps(second, compile_model(second, config))
    assert counters["inductor"]["fxgraph_cache_hit"] - hits == 3  # every piece came from the cache
    for got, want in zip(compiled, eager):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-5)


def test_memory_formats_pickle_by_name_only_while_compiling():
    import copyreg
    import pickle

    from ascendtile.compilation.cache_key import memory_format, memory_formats_by_name

    with memory_formats_by_name():
        by_name = pickle.dumps(torch.channels_last)
        assert b"ascendtile.compilation.cache_key" in by_name and b"channels_last" in by_name
        assert pickle.loads(by_name) is torch.channels_last
    assert torch.memory_format not in copyreg.dispatch_table
    with pytest.raises(ValueError, match="^name: torch.float32 is not a memory format"):
        memory_format("float32")
