"""Compilation levels end to end through LLM on a tiny random Llama: greedy tokens equal level 0
at levels 1, 2 and 3, and levels 2 and 3 compile once over a 64-step generation whose steps change the
token count, batch size, block-table width and max_seqlen ints (prefill, mixed, decode of 4 down
to 1 sequences); over an int8 KV cache too (its scale caches are graph inputs beside the caches)."""
import pytest

from ascendtile.compilation import CompiledModel
from ascendtile.runtime import LLM, SamplingParams
from compilation import tiny

PROMPTS = [[5, 9, 100, 7, 2, 33, 61], [11, 12], [40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57],
           [3], [90, 91, 92]]
MAX_TOKENS = [64, 9, 30, 20, 5]  # staggered finishes: the batch shrinks, later prompts join mid-decode


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return tiny.save(tmp_path_factory.mktemp("tiny"))


def _generate(tiny_dir, compilation_config, graph="off", kv_cache_dtype="auto"):
    llm = LLM(tiny_dir, max_model_len=256, max_num_seqs=4, num_kv_blocks=64, graph=graph,
              compilation_config=compilation_config, kv_cache_dtype=kv_cache_dtype)
    params = [SamplingParams(temperature=0, max_tokens=n, ignore_eos=True) for n in MAX_TOKENS]
    outputs = llm.generate(PROMPTS, params, use_tqdm=False)
    return llm, [o.outputs[0].token_ids for o in outputs]


@pytest.fixture(scope="module")
def eager_tokens(tiny_dir):
    llm, tokens = _generate(tiny_dir, None)
    assert llm.engine.model is llm.model  # level 0: the model itself
    return tokens


@pytest.mark.parametrize("level, graph", [(2, "off"), (2, "auto"), (3, "auto")])
def test_levels_2_and_3_compile_once_over_64_steps(tiny_dir, eager_tokens, level, graph):
    llm, tokens = _generate(tiny_dir, {"level": level, "use_inductor": False}, graph)
    assert llm.last_stats.num_steps >= 64
    assert isinstance(llm.engine.model, CompiledModel)
    assert llm.engine.model.backend.num_compiles == 1
    assert len(llm.engine.model.backend.splits) == (level == 3)
    assert tokens == eager_tokens


def test_level_3_over_an_int8_kv_cache(tiny_dir):
    """Level 3 splits at attention with the int8 write joining it (it writes the caches and scale
    caches the attention reads); greedy tokens equal level 0's over the same int8 cache."""
    _, eager = _generate(tiny_dir, None, kv_cache_dtype="int8")
    llm, tokens = _generate(tiny_dir, {"level": 3, "use_inductor": False}, "auto", kv_cache_dtype="int8")
    assert llm.engine.model.backend.num_compiles == 1 and len(llm.engine.model.backend.splits) == 1
    assert tokens == eager


def test_level_1_runs_dynamo_as_is(tiny_dir, eager_tokens):
    llm, tokens = _generate(tiny_dir, {"level": 1, "use_inductor": False})
    # Dynamo's defaults: shapes and ints first seen static recompile as they change (5 measured)
    assert llm.engine.model.backend.num_compiles >= 1
    assert tokens == eager_tokens


@pytest.mark.slow  # Inductor compiles the tiny model in tens of seconds on this CPU
def test_level_2_with_inductor(tiny_dir, eager_tokens):
    """CPU level 2 as shipped: the ops' references inside the graph, compiled by Inductor. One compile:
    the first step has many tokens, and no lowering may specialize on the token count (a size-1 step
    runs the same graph)."""
    llm, tokens = _generate(tiny_dir, 2)
    assert llm.engine.model.backend.num_compiles == 1
    assert tokens == eager_tokens
