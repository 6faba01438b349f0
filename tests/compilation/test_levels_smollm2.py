"""Every compilation level runs the embedded SmolLM2-135M-Instruct to HF transformers' greedy
tokens (issue 15's acceptance) on the parity prompts of tests/embedded.py (level 0 is
tests/runtime/test_smollm2.py's test). Levels 2 and 3 compile once with Inductor; level 3 cuts the
graph into one piece more than there are layers, and the identical decoder-layer pieces are
compiled once and read back from the FX graph cache (an empty cache_dir per module). Level 1
(Dynamo as is, recompiling as shapes change) runs Dynamo's graphs without Inductor: what it adds
over level 2 is tracing and guards; Inductor's code for this model is levels 2 and 3's."""
import pytest
from torch._dynamo.utils import counters

from ascendtile.runtime import LLM, SamplingParams
from embedded import NEW_TOKENS, PARITY, SMOLLM2

pytestmark = [pytest.mark.slow, SMOLLM2]  # ~1 min of Inductor per level on this CPU

GREEDY = SamplingParams(temperature=0, max_tokens=NEW_TOKENS)


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("compile_cache"))


@pytest.mark.parametrize("level, use_inductor", [(1, False), (2, True), (3, True)])
def test_level_gives_hf_greedy_tokens(level, use_inductor, smollm2, hf_smollm2_greedy, cache_dir):
    hits = counters["inductor"]["fxgraph_cache_hit"]
    llm = LLM(smollm2, max_model_len=256, max_num_seqs=4,
              compilation_config={"level": level, "cache_dir": cache_dir, "use_inductor": use_inductor})
    tokens = [o.outputs[0].token_ids for o in llm.generate(PARITY, GREEDY, use_tqdm=False)]
    compiled = llm.engine.model
    print(compiled.describe())
    assert tokens == hf_smollm2_greedy
    if level == 1:
        assert compiled.backend.num_compiles >= 1
    else:
        assert compiled.backend.num_compiles == 1
    if level == 3:
        layers = llm.model_config.num_hidden_layers
        assert len(compiled.backend.splits[0].pieces) == layers + 1
        assert counters["inductor"]["fxgraph_cache_hit"] - hits >= layers - 3
