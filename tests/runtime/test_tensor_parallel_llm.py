"""LLM(model, tensor_parallel_size=2) over 2 spawned gloo ranks (runtime/tp_executor.py,
tp_worker.py) and under torchrun: the same tokens as tensor_parallel_size=1 (greedy and seeded
sampling) for a tiny random Llama checkpoint, stats with the collectives' bytes; a rank's load
error, a worker killed mid-run and bad sizes are clear errors; no worker outlives the LLM.
Every spawn is bounded by tp_timeout_s, every generate by the watched workers."""
from __future__ import annotations

import gc
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig

import ascendtile
from ascendtile.compilation.config import default_cache_dir
from ascendtile.cpu import dispatch
from ascendtile.model import load_model
from ascendtile.runtime import LLM, SamplingParams
from embedded import GEMMA3
from model.helpers import save_tiny

SIZES = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2, initializer_range=0.1,
             max_position_embeddings=4096, tie_word_embeddings=True)
TIMEOUT_S = 180  # a rank's spawn + torch import + load on a busy 2-core machine, with room
OPTIONS = dict(num_kv_blocks=1100, max_num_seqs=4, tp_timeout_s=TIMEOUT_S)  # 4 prompts of 4096 tokens fit
REPO = Path(ascendtile.__file__).resolve().parents[1]
PROMPTS = [[5, 6, 7, 8], [9, 10, 11], list(range(3, 40)), [100, 3, 100, 3, 7]]
LEVELS = [0, 2, 3]  # compilation levels of the torchrun ranks


def _alive(pid: int) -> bool:
    """Whether a process with this pid still exists (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _wait_gone(pids: list[int], within_s: float = 10.0) -> list[int]:
    deadline = time.monotonic() + within_s
    while any(map(_alive, pids)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [pid for pid in pids if _alive(pid)]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    directory = tmp_path_factory.mktemp("tiny_llama")
    save_tiny(LlamaConfig(**SIZES, num_attention_heads=4, num_key_value_heads=2), directory, randomize_norms=True)
    return str(directory)


def _tokens(outputs) -> list[list[int]]:
    return [list(o.outputs[0].token_ids) for o in outputs]


@pytest.mark.slow
def test_tp2_generates_the_tp1_tokens_and_leaves_no_process(tiny):
    greedy = SamplingParams(max_tokens=12, ignore_eos=True)
    sampled = [SamplingParams(temperature=0.9, top_p=0.9, seed=7 + i, max_tokens=10, ignore_eos=True) for i in range(3)]
    sampled.append(SamplingParams(temperature=1.0, max_tokens=10, ignore_eos=True))  # seed from the engine's generator
    one = LLM(tiny, **OPTIONS)
    want_greedy, want_sampled = _tokens(one.generate(PROMPTS, greedy, use_tqdm=False)), \
        _tokens(one.generate(PROMPTS, sampled, use_tqdm=False))
    assert set(one.last_stats.collective_bytes.values()) == {0}  # TP=1 runs no collective

    two = LLM(tiny, tensor_parallel_size=2, **OPTIONS)
    pids = two.worker_pids
    assert len(pids) == 2 and all(map(_alive, pids)) and two.model is None and two.engine is None
    assert two.config.num_kv_blocks == 1100 and two.model_config.vocab_size == 128
    got = two.generate(PROMPTS, greedy, use_tqdm=False)
    assert _tokens(got) == want_greedy
    assert [o.prompt_token_ids for o in got] == PROMPTS and all(o.outputs[0].finish_reason == "length" for o in got)
    stats = two.last_stats
    assert (stats.num_requests, stats.prompt_tokens, stats.generated_tokens) == (4, 49, 48) and stats.num_steps >= 12
    # per step: 2 layers x 2 all-reduces + the embedding's, of [tokens, 64] fp32; logits [rows, 128] fp32 gathered
    computed_tokens = 49 + 4 * 11  # prompts, then every generated token but the last is fed back
    assert stats.collective_bytes == {"all_reduce": 5 * computed_tokens * 64 * 4, "all_gather": 48 * 128 * 4}
    assert _tokens(two.generate(PROMPTS, sampled, use_tqdm=False)) == want_sampled

    two.shutdown()
    assert _wait_gone(pids) == []
    with pytest.raises(RuntimeError, match="shut down"):
        two.generate(PROMPTS, greedy, use_tqdm=False)


@pytest.mark.slow
def test_garbage_collected_llm_stops_its_workers(tiny):
    llm = LLM(tiny, tensor_parallel_size=2, **OPTIONS)
    pids = llm.worker_pids
    assert all(map(_alive, pids))
    del llm
    gc.collect()
    assert _wait_gone(pids) == []


@pytest.mark.slow
def test_worker_killed_mid_run_is_an_error_naming_it(tiny):
    llm = LLM(tiny, tensor_parallel_size=2, **OPTIONS)
    pids = llm.worker_pids
    killer = threading.Timer(1.0, os.kill, (pids[1], signal.SIGKILL))  # thousands of steps: still running then
    killer.start()
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"rank 1 was killed by SIGKILL \(exit code -9\)"):
        llm.generate(PROMPTS, SamplingParams(max_tokens=4000, ignore_eos=True), use_tqdm=False)
    killer.join()
    assert time.monotonic() - start < 60  # detected at once, not after the collectives' timeout
    assert _wait_gone(pids) == []
    with pytest.raises(RuntimeError, match="shut down"):
        llm.generate(PROMPTS, use_tqdm=False)


@pytest.mark.slow
def test_unsplittable_heads_fail_the_start_naming_the_field(tmp_path):
    save_tiny(LlamaConfig(**{**SIZES, "hidden_size": 48}, num_attention_heads=3, num_key_value_heads=3), tmp_path)
    with pytest.raises(RuntimeError, match=r"rank \d raised ValueError: num_attention_heads: .*tensor_parallel_size 2"):
        LLM(str(tmp_path), tensor_parallel_size=2, **OPTIONS)
    assert multiprocessing.active_children() == []  # every worker was joined


@pytest.mark.slow
def test_torchrun_ranks_generate_the_tp1_tokens_and_count_collectives_at_every_level(tiny, tmp_path, monkeypatch):
    """Two ranks launched by torchrun, each calling LLM(..., tensor_parallel_size=2).generate on the
    same prompts, run in-process as their rank (no spawned workers) and get the TP=1 tokens, eagerly
    and at compilation levels 2 and 3 (one compile each); the compiled graphs count the collectives'
    bytes as they run, so each level's all-reduce and all-gather bytes equal the eager run's."""
    want = _tokens(LLM(tiny, **OPTIONS).generate(PROMPTS, SamplingParams(max_tokens=8, ignore_eos=True),
                                                 use_tqdm=False))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           str(Path(__file__).with_name("torchrun_generate.py")), tiny, str(tmp_path), json.dumps(PROMPTS), "8",
           json.dumps(LEVELS)]
    monkeypatch.setenv("ASCENDTILE_CACHE_DIR", str(tmp_path / "cache"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")])}
    # The ops library in the ranks' cache_dir (copied from this process's, or built here once):
    # each rank found none and built its own, ~25 s of CPU between them on a 2-core AVX2 EPYC.
    dispatch.library(default_cache_dir())
    launcher = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)  # its own process group: a timeout kills every rank
    try:
        log, _ = launcher.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(launcher.pid, signal.SIGKILL)
        log, _ = launcher.communicate()
        pytest.fail(f"torchrun ranks still running after {TIMEOUT_S} s:\n{log[-3000:]}")
    assert launcher.returncode == 0, log[-3000:]
    # per step: 2 layers x 2 all-reduces + the embedding's, of [tokens, 64] fp32; logits [rows, 128] fp32 gathered
    computed_tokens = sum(map(len, PROMPTS)) + 4 * 7  # prompts, then every generated token but the last
    eager_bytes = {"all_reduce": 5 * computed_tokens * 64 * 4, "all_gather": 4 * 8 * 128 * 4}
    for rank in range(2):
        result = json.loads((tmp_path / f"rank{rank}.json").read_text())
        for level in LEVELS:
            run = result[str(level)]
            assert run["tokens"] == want and run["in_process"], (rank, level)
            assert run["compiles"] == min(level, 1), (rank, level)
            assert run["collective_bytes"] == eager_bytes, (rank, level)  # each rank gathered the logits itself


def test_kv_blocks_are_the_minimum_over_the_ranks(monkeypatch):
    """create_engine's agreement (a peer with less memory wins) through the counted all_reduce,
    with a stand-in for the peer's side of torch.distributed."""
    from ascendtile.distributed import collective_bytes, collectives, group
    from ascendtile.runtime.engine_args import _agreed_blocks

    monkeypatch.setattr(group._GROUP, "size", 2)
    ops = []

    def peer_holds_70(x, op):
        ops.append(op)
        x.copy_(torch.minimum(x, torch.tensor([70])))

    monkeypatch.setattr(collectives.dist, "all_reduce", peer_holds_70)
    before = collective_bytes()["all_reduce"]
    assert (_agreed_blocks(100), _agreed_blocks(50)) == (70, 50)
    assert ops == [torch.distributed.ReduceOp.MIN] * 2 and collective_bytes()["all_reduce"] - before == 2 * 8
    with pytest.raises(ValueError, match="^op: must be one of"):
        collectives.all_reduce(torch.zeros(1), op="mean")


def test_compiled_collectives_count_every_run(monkeypatch):
    """A compiled graph keeps each collective as a custom op node that counts when the graph runs
    (three calls: three counts), not once at trace time; with stand-ins for the peer's side."""
    from ascendtile.distributed import collective_bytes, collectives, group

    monkeypatch.setattr(group._GROUP, "size", 2)
    monkeypatch.setattr(collectives.dist, "all_reduce", lambda x, op: x.mul_(2))  # the peer holds the same x
    monkeypatch.setattr(collectives.dist, "all_gather", lambda parts, x: [p.copy_(x) for p in parts])
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    step = torch.compile(lambda x: collectives.all_gather(collectives.all_reduce(x + 1), dim=-1), backend=backend,
                         fullgraph=True)
    before = collective_bytes()
    for _ in range(3):
        out = step(torch.ones(3, 5))
    assert torch.equal(out, torch.full((3, 10), 4.0))
    assert len(graphs) == 1 and {str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"} >= {
        "ascend_dist.all_reduce.default", "ascend_dist.all_gather.default"}
    moved = {kind: n - before[kind] for kind, n in collective_bytes().items()}
    assert moved == {"all_reduce": 3 * 15 * 4, "all_gather": 3 * 30 * 4}


@pytest.mark.parametrize("size, error, message", [
    (0, ValueError, "must be >= 1, got 0"), (-2, ValueError, "must be >= 1"), (1.5, TypeError, "must be an int"),
    ("2", TypeError, "must be an int, got str"), (True, TypeError, "must be an int, got bool"),
])
def test_bad_tensor_parallel_size_names_it(size, error, message):
    with pytest.raises(error, match=f"^tensor_parallel_size: {message}"):
        LLM("no-such-model", tensor_parallel_size=size)  # refused before anything loads


def test_loaded_model_cannot_be_spawned_and_torchrun_world_must_match(tiny, monkeypatch):
    with pytest.raises(ValueError, match="^model: a LoadedModel"):
        LLM(load_model(tiny), tensor_parallel_size=2, **OPTIONS)
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_RANK", "0")
    with pytest.raises(ValueError, match="^tensor_parallel_size: 2, but torchrun launched WORLD_SIZE=4"):
        LLM(tiny, tensor_parallel_size=2, **OPTIONS)


@pytest.mark.slow
@GEMMA3
def test_gemma3_270m_tp2_chat_greedy_tokens_equal_tp1(gemma3):
    """The embedded Gemma 3 270M (4 query heads on its single KV head, replicated on both ranks;
    262,144-token tied vocabulary split in two) gives the single-process greedy tokens (the
    session's model, tests/embedded.py) on chat prompts (written in Gemma's turn format: the base
    GGUF carries no chat template)."""
    prompts = [f"<start_of_turn>user\n{text}<end_of_turn>\n<start_of_turn>model\n" for text in
               ("What is the capital of France?", "Name three colours.", "Count from one to five.")]
    params = SamplingParams(max_tokens=12)
    want = _tokens(LLM(gemma3, max_num_seqs=4, num_kv_blocks=64).generate(prompts, params, use_tqdm=False))
    llm = LLM("gemma3-270m", tensor_parallel_size=2, max_num_seqs=4, num_kv_blocks=64, tp_timeout_s=TIMEOUT_S)
    try:
        assert _tokens(llm.generate(prompts, params, use_tqdm=False)) == want
    finally:
        llm.shutdown()
    assert all(len(tokens) > 0 for tokens in want)
