"""Every compilation level runs the embedded SmolLM2-135M-Instruct to HF transformers' greedy
tokens (issue 15's acceptance), with Inductor, on tests/runtime/test_smollm2.py's parity prompts
(level 0 is that file's own test). Levels 2 and 3 compile once; level 3 cuts the graph into one
piece more than there are layers, and the identical decoder-layer pieces are compiled once and read
back from the FX graph cache (an empty cache_dir per module)."""
import os

import pytest
import torch
from torch._dynamo.utils import counters

from ascendkit.model import default_model_path
from ascendkit.runtime import LLM
from runtime.test_smollm2 import GREEDY, NEW_TOKENS, PARITY

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("smollm2_compile")]  # ~1-2 min of Inductor per level


@pytest.fixture(scope="module")
def hf_tokens() -> list[list[int]]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = default_model_path()
    directory, name = os.path.dirname(path), os.path.basename(path)
    hf = AutoModelForCausalLM.from_pretrained(directory, gguf_file=name, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=name)
    tokens = []
    for prompt in PARITY:
        ids = tokenizer(prompt)["input_ids"]
        with torch.inference_mode():
            tokens.append(hf.generate(torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False)[0, len(ids):].tolist())
    assert all(len(t) == NEW_TOKENS for t in tokens)
    return tokens


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("compile_cache"))


@pytest.mark.parametrize("level", [1, 2, 3])
def test_level_gives_hf_greedy_tokens(level, hf_tokens, cache_dir):
    hits = counters["inductor"]["fxgraph_cache_hit"]
    llm = LLM("default", max_model_len=256, max_num_seqs=4, compilation_config={"level": level, "cache_dir": cache_dir})
    tokens = [o.outputs[0].token_ids for o in llm.generate(PARITY, GREEDY, use_tqdm=False)]
    compiled = llm.engine.model
    print(compiled.describe())
    assert tokens == hf_tokens
    if level >= 2:
        assert compiled.backend.num_compiles == 1
    if level == 3:
        layers = llm.model_config.num_hidden_layers
        assert len(compiled.backend.splits[0].pieces) == layers + 1
        assert counters["inductor"]["fxgraph_cache_hit"] - hits >= layers - 3
