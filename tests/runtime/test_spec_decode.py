"""Speculative decoding (n-gram drafts) in the runtime. On a tiny random Llama (2 layers, vocab
128, whose greedy output falls into repeats the n-gram proposer drafts): greedy output, with and
without penalties and logprobs, is token for token the output without speculation — batched,
alone, in small prefill chunks and through preemption — with drafts proposed and accepted; a
seeded sampled request draws the same tokens alone, batched and after preemption; a top_k=1
sampled request (the random rejection path with one-hot targets) emits the greedy tokens; the
RejectionSampler's emitted tokens follow the processed target distributions (4000 seeds); stop
tokens and max_tokens cut inside a multi-token step; blocks committed to the prefix cache hold
accepted tokens only; the scheduler's draft budgeting rules; spawned tensor-parallel ranks
speculate; bad configs name the field. With device graphs (on CPU: the GraphRunner uncaptured, level 3's pieces
through a fake graph class) greedy output is the same: plain decode steps through the bucketed
GraphRunner and verify steps eagerly beside it; level 3's captured pieces covering verify steps
of more tokens than sequences. On the embedded SmolLM2 and Gemma 3: greedy
equality on 32 prompts (repeating and plain), alone, chunked and preempted, and stop strings."""
from __future__ import annotations

import random

import pytest
import torch

from ascendtile.compilation import CaptureSpec
from ascendtile.runtime import LLM, SamplingParams
from ascendtile.runtime import engine as engine_module
from ascendtile.runtime.graph_runner import GraphRunner
from ascendtile.runtime.speculative_config import SpeculativeConfig
from compilation import tiny as tiny_llama
from embedded import GEMMA3, SMOLLM2

NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 3}
TINY_ARGS = dict(max_model_len=256, max_num_seqs=8, block_size=4)
# the graph runner's and compiled steps' unvalidated calls meet the ops' checks: blocks of 16
BLOCKS_OF_16 = {**TINY_ARGS, "block_size": 16}
GREEDY = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tiny_llama.save(tmp_path_factory.mktemp("tiny_spec"), randomize_norms=False)


def _prompts() -> list[list[int]]:
    rng = random.Random(0)
    repeating = [[5, 9, 100, 7, 2, 33, 61] * 3, [1, 2, 3, 4] * 5, [40, 41, 42, 40, 41]]
    plain = [[rng.randrange(128) for _ in range(rng.randrange(3, 30))] for _ in range(5)]
    return repeating + plain


def generate(model, prompts, params, spec: bool, **kw) -> tuple[list, LLM]:
    llm = LLM(model, **{**TINY_ARGS, **kw}, speculative_config=NGRAM if spec else None)
    return llm.generate(prompts, params, use_tqdm=False), llm


def token_ids(outputs) -> list[list[int]]:
    return [o.outputs[0].token_ids for o in outputs]


def assert_accepted(llm: LLM) -> None:
    metrics = llm.spec_decode_metrics
    assert metrics.num_draft_tokens > 0 and metrics.num_accepted_tokens > 0, metrics
    assert 0 < metrics.acceptance_rate <= 1
    assert 1 < metrics.mean_acceptance_length <= 1 + NGRAM["num_speculative_tokens"]


@pytest.fixture(scope="module")
def tiny_greedy(tiny):
    outputs, llm = generate(tiny, _prompts(), GREEDY, spec=False)
    assert llm.spec_decode_metrics is None
    return token_ids(outputs), llm.last_stats.num_steps


@pytest.mark.parametrize("config", [
    {}, {"max_num_batched_tokens": 8}, {"num_kv_blocks": 40}, {"max_num_seqs": 1}, {"enable_prefix_caching": False},
], ids=["batch", "chunks_8", "preemption", "alone", "no_prefix_cache"])
def test_greedy_equals_no_speculation(tiny, tiny_greedy, config):
    expected, steps = tiny_greedy
    outputs, llm = generate(tiny, _prompts(), GREEDY, spec=True, **config)
    assert token_ids(outputs) == expected
    assert_accepted(llm)
    if "num_kv_blocks" in config:
        assert llm.last_stats.num_preemptions > 0
    if not config:
        assert llm.last_stats.num_steps < steps  # several tokens per step


def test_greedy_with_penalties_and_logprobs_equals_no_speculation(tiny, tiny_greedy):
    """Penalties count the drafts before each verified position exactly; logprobs are the
    model's raw ones for each emitted token. (Mild penalties: strong ones leave no repeats to
    draft.)"""
    penalties = [{"repetition_penalty": 1.1}, {"frequency_penalty": 0.1}, {"presence_penalty": 0.1}]
    params = [SamplingParams(temperature=0, max_tokens=40, ignore_eos=True, logprobs=3, **penalties[i % 3])
              for i in range(len(_prompts()))]
    plain, _ = generate(tiny, _prompts(), params, spec=False)
    spec, llm = generate(tiny, _prompts(), params, spec=True)
    assert token_ids(spec) == token_ids(plain)
    assert token_ids(plain) != tiny_greedy[0]  # the penalties changed the tokens
    assert_accepted(llm)
    for a, b in zip(plain, spec):
        assert len(b.outputs[0].logprobs) == len(b.outputs[0].token_ids)
        for x, y in zip(a.outputs[0].logprobs, b.outputs[0].logprobs):
            assert x.keys() == y.keys()
            assert all(abs(x[t] - y[t]) < 1e-4 for t in x)


def test_top_k_1_sampling_takes_the_random_path_to_the_greedy_tokens(tiny, tiny_greedy):
    """top_k=1 makes each target one-hot at its argmax: the random rejection path must then
    accept exactly the drafts equal to the argmax and recover the argmax."""
    expected, _ = tiny_greedy
    params = SamplingParams(temperature=1.0, top_k=1, max_tokens=40, ignore_eos=True, seed=7)
    outputs, llm = generate(tiny, _prompts(), params, spec=True)
    assert token_ids(outputs) == expected
    assert_accepted(llm)


def test_seeded_sampling_alone_batched_and_preempted(tiny):
    prompts = _prompts()
    params = [SamplingParams(temperature=0.3 if i % 3 else 1.0, top_p=0.9, max_tokens=30, ignore_eos=True,
                             seed=100 + i, **({"repetition_penalty": 1.2} if i % 2 else {}))
              for i in range(len(prompts))]
    batched, llm = generate(tiny, prompts, params, spec=True)
    assert_accepted(llm)
    preempted, llm = generate(tiny, prompts, params, spec=True, num_kv_blocks=30)
    assert llm.last_stats.num_preemptions > 0
    assert token_ids(preempted) == token_ids(batched)
    for i in (0, 1, 4):
        alone, _ = generate(tiny, [prompts[i]], params[i], spec=True, max_num_seqs=1)
        assert token_ids(alone) == [token_ids(batched)[i]]
    greedy, _ = generate(tiny, prompts, GREEDY, spec=False)
    assert token_ids(batched) != [g[:30] for g in token_ids(greedy)]  # it really sampled


def test_stop_token_and_max_tokens_cut_inside_a_step(tiny, tiny_greedy):
    """The prompt [1, 2, 3, 4] * 5 greedy-decodes runs of one token that drafts cover: the stop
    token / the max_tokens-th token arrives in a step that emitted several tokens."""
    expected = tiny_greedy[0][1]
    prompt = _prompts()[1]
    for cut in range(3, 12):
        stop_token = expected[cut]
        first = expected.index(stop_token)
        out = generate(tiny, [prompt], SamplingParams(temperature=0, max_tokens=40, stop_token_ids=[stop_token]),
                       spec=True)[0][0]
        assert out.outputs[0].token_ids == expected[:first + 1]
        assert out.outputs[0].finish_reason == "stop" and out.outputs[0].stop_reason == stop_token
        out = generate(tiny, [prompt], SamplingParams(temperature=0, max_tokens=cut, ignore_eos=True), spec=True)[0][0]
        assert out.outputs[0].token_ids == expected[:cut] and out.outputs[0].finish_reason == "length"
    # a step emitting several tokens: equal times (per_token_latency 0) somewhere in the output
    out = generate(tiny, [prompt], GREEDY, spec=True)[0][0]
    assert 0.0 in out.per_token_latency


def test_prefix_cache_holds_accepted_tokens_only(tiny):
    """After every step, each block registered in the prefix cache holds the tokens of the
    sequence that computed it, at its place in that sequence's token list (rejected drafts never
    are); a later request repeating a finished one's tokens hits all its full blocks."""
    llm = LLM(tiny, **TINY_ARGS, speculative_config=NGRAM)
    engine, bm = llm.engine, llm.engine.block_manager
    seqs = [engine.add(p, GREEDY) for p in _prompts()]
    owner: dict[int, tuple[int, int]] = {}  # block -> (seq index, block index in its table)
    while engine.has_unfinished():
        for s, seq in enumerate(seqs):
            for i, block in enumerate(seq.block_table):
                owner.setdefault(block, (s, i))
        engine.step()
        for block, (s, i) in owner.items():
            if bm.block_hash[block] is not None:
                assert bm.block_tokens[block] == tuple(seqs[s].token_ids[i * 4:(i + 1) * 4])
        for seq in seqs:
            assert seq.is_finished or seq.num_computed_tokens == len(seq) - 1
    metrics = engine.spec_metrics
    assert metrics.num_accepted_tokens > 0 and metrics.num_draft_tokens > metrics.num_accepted_tokens  # rejections
    full = seqs[1].token_ids
    again = llm.generate(full, SamplingParams(temperature=0, max_tokens=2), use_tqdm=False)[0]
    assert again.metrics.num_cached_tokens == (len(full) - 1) // 4 * 4


def test_scheduler_budgets_drafts_without_cutting_them_for_the_batch():
    """A recompute whose last chunk cannot take its drafts stops one token short (the drafts wait
    for the next step, whole); a decode whose 1 + drafts exceed the budget gets the drafts that
    fit; the blocks cover the drafts; no drafts before the first output token."""
    from ascendtile.runtime.block_manager import BlockManager
    from ascendtile.runtime.drafter import Drafter
    from ascendtile.runtime.scheduler import Scheduler
    from ascendtile.runtime.sequence import Sequence

    config = SpeculativeConfig(method="ngram", num_speculative_tokens=3, prompt_lookup_min=1, prompt_lookup_max=1)

    def schedule(budget: int, outputs: int):
        seq = Sequence(0, [1, 2, 1, 2, 1, 2], SamplingParams(max_tokens=20), 64)
        for token in [1] * outputs:
            seq.append_token(token, None, 0.0)
        bm = BlockManager(64, 4)
        scheduler = Scheduler(bm, 1, budget, drafter=Drafter(config))
        scheduler.add(seq)
        return scheduler.schedule(), seq, bm

    batch, seq, _ = schedule(10, outputs=0)
    assert batch.num_new_tokens == [6] and batch.draft_token_ids == [[]]  # a first prefill: no drafts
    batch, seq, _ = schedule(10, outputs=1)  # history 1 2 1 2 1 2 1: "1" first at 0, drafts 2 1 2
    assert batch.num_new_tokens == [7] and batch.draft_token_ids == [[2, 1, 2]] and batch.num_tokens == 10
    assert len(seq.block_table) == 3  # 10 tokens in blocks of 4
    batch, seq, _ = schedule(9, outputs=1)
    assert batch.num_new_tokens == [6] and batch.draft_token_ids == [[]]
    scheduler = Scheduler(BlockManager(64, 4), 1, 2, drafter=Drafter(config))
    seq = Sequence(1, [1, 2, 1, 2, 1, 2], SamplingParams(max_tokens=20), 64)
    scheduler.add(seq)
    while seq.num_uncomputed:  # the prompt in chunks of 2
        seq.advance(scheduler.schedule().num_new_tokens[0])
    seq.append_token(1, None, 0.0)
    batch = scheduler.schedule()  # a decode: 1 token + 1 of its 3 drafts fit the budget of 2
    assert batch.num_new_tokens == [1] and batch.draft_token_ids == [[2]]


@pytest.mark.parametrize("value, match", [
    ({"method": "eagle", "num_speculative_tokens": 2}, "speculative_config.method"),
    ({"method": "ngram", "num_speculative_tokens": 0}, "speculative_config.num_speculative_tokens"),
    ({"method": "ngram"}, "speculative_config.num_speculative_tokens"),
    ({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 4, "prompt_lookup_max": 2},
     "speculative_config.prompt_lookup_max"),
    ({"method": "ngram", "num_speculative_tokens": 2, "lookahead": 1}, "speculative_config: unknown"),
    ("ngram", "speculative_config"),
])
def test_bad_speculative_config_names_the_field(tiny, value, match):
    with pytest.raises((ValueError, TypeError), match=match):
        LLM(tiny, **TINY_ARGS, speculative_config=value)


def test_greedy_through_padded_decode_graphs_equals_no_speculation(tiny, tiny_greedy):
    """As on NPU/CUDA with graph="auto": plain decode steps through the bucketed GraphRunner
    (uncaptured on CPU: same static buffers and padding), verify steps eagerly beside it."""
    # drafts only on a 3-token match: some steps find none and run as plain decode steps
    llm = LLM(tiny, **BLOCKS_OF_16, speculative_config={**NGRAM, "prompt_lookup_min": 3})
    c = llm.config
    runner = llm.engine.runner.graph_runner = GraphRunner(llm.model, c.max_num_seqs, c.max_model_len, c.block_size,
                                                          c.device, capture=False)
    padded_steps, run = [], runner.run
    runner.run = lambda ids, *a: padded_steps.append(ids.shape[0]) or run(ids, *a)
    assert token_ids(llm.generate(_prompts(), GREEDY, use_tqdm=False)) == tiny_greedy[0]
    assert_accepted(llm)
    assert padded_steps  # some steps had no drafts to verify and replayed the decode graphs


class RecordingGraph:
    """The DeviceGraph protocol on CPU (capture runs the piece, replay reruns it into the static
    outputs, as a device graph would), recording the token count of every capture."""
    sizes: list[int] = []

    def capture(self, fn):
        self.fn, self.outputs = fn, fn()
        RecordingGraph.sizes.append(max(o.shape[0] for o in self.outputs if isinstance(o, torch.Tensor) and o.dim()))
        return self.outputs

    def replay(self):
        for static, new in zip(self.outputs, self.fn()):
            static.copy_(new)


def test_level3_captured_pieces_cover_verify_steps(tiny, tiny_greedy, monkeypatch):
    """Level 3 on a device with graphs captures its pieces per token count: a verify step of
    1 + drafts tokens per sequence pads to the next capture size like any step."""
    RecordingGraph.sizes = []
    monkeypatch.setattr(engine_module, "piece_capture", lambda config, device_type, max_num_seqs: CaptureSpec(
        RecordingGraph, (1, 2, 4, 8, 16, 32)))
    llm = LLM(tiny, **BLOCKS_OF_16, speculative_config=NGRAM, compilation_config={"level": 3, "use_inductor": False})
    assert token_ids(llm.generate(_prompts(), GREEDY, use_tqdm=False)) == tiny_greedy[0]
    assert_accepted(llm)
    # sizes above max_num_seqs (8) hold more tokens than sequences: verify steps, not prefills,
    # since every prompt is prefilled in one step of more than 32 tokens (uncaptured)
    assert max(RecordingGraph.sizes) > TINY_ARGS["max_num_seqs"], RecordingGraph.sizes


@pytest.mark.slow
def test_tensor_parallel_ranks_speculate_too(tiny, tiny_greedy):
    """Two spawned ranks get the speculative_config with the EngineArgs; rank 0's counts come back
    in the call's stats."""
    llm = LLM(tiny, **TINY_ARGS, speculative_config=NGRAM, tensor_parallel_size=2)
    try:
        assert token_ids(llm.generate(_prompts()[:3], GREEDY, use_tqdm=False)) == tiny_greedy[0][:3]
        assert_accepted(llm)
    finally:
        llm.shutdown()


# The embedded models: greedy equality where real text repeats (code, lists) and where it does not.
REPEATING = ["def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n",
             "Monday, Tuesday, Wednesday, Thursday, Friday, Monday, Tuesday, Wednesday,",
             "The cat sat on the mat. The dog sat on the log. The cat sat on the",
             "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,"]
PLAIN = ["The capital of Germany is", "Once upon a time, in a small village,", "Write a short poem about rain.",
         "What is the boiling point of water?"]
EMBEDDED_ARGS = dict(max_model_len=256, max_num_seqs=32, block_size=16)
EMBEDDED_GREEDY = SamplingParams(temperature=0, max_tokens=24)


def _embedded_prompts() -> list[str]:
    prompts = [f"Example {i // 8}: " + (REPEATING if i % 2 == 0 else PLAIN)[i // 2 % 4] for i in range(32)]
    assert len(set(prompts)) == 32
    return prompts


def _check_embedded(model) -> None:
    prompts = _embedded_prompts()
    expected = token_ids(LLM(model, **EMBEDDED_ARGS).generate(prompts, EMBEDDED_GREEDY, use_tqdm=False))
    # as configured, then with prefills chunked under a 40-token budget and a cache so small that
    # sequences are preempted (both in one run: each still happens, and they meet)
    for config in ({}, {"max_num_batched_tokens": 40, "num_kv_blocks": 24}):
        llm = LLM(model, **{**EMBEDDED_ARGS, **config}, speculative_config=NGRAM)
        assert token_ids(llm.generate(prompts, EMBEDDED_GREEDY, use_tqdm=False)) == expected, config
        assert_accepted(llm)
        if config:
            assert llm.last_stats.num_preemptions > 0
    llm = LLM(model, **{**EMBEDDED_ARGS, "max_num_seqs": 1}, speculative_config=NGRAM)
    assert token_ids(llm.generate(prompts[:2], EMBEDDED_GREEDY, use_tqdm=False)) == expected[:2]
    assert_accepted(llm)


@pytest.mark.slow
@SMOLLM2
def test_smollm2_greedy_equals_no_speculation(smollm2):
    _check_embedded(smollm2)


@pytest.mark.slow
@GEMMA3
def test_gemma3_greedy_equals_no_speculation(gemma3):
    _check_embedded(gemma3)


@pytest.mark.slow
@SMOLLM2
def test_smollm2_stop_string_inside_a_step(smollm2):
    """A stop string found in a step that emitted several tokens cuts the text there, as without
    speculation."""
    prompt = REPEATING[1]
    full = LLM(smollm2, **EMBEDDED_ARGS).generate(prompt, EMBEDDED_GREEDY, use_tqdm=False)[0].outputs[0]
    stop = full.text.split(",")[3].strip()
    params = SamplingParams(temperature=0, max_tokens=24, stop=[stop])
    plain = LLM(smollm2, **EMBEDDED_ARGS).generate(prompt, params, use_tqdm=False)[0].outputs[0]
    llm = LLM(smollm2, **EMBEDDED_ARGS, speculative_config=NGRAM)
    spec = llm.generate(prompt, params, use_tqdm=False)[0]
    assert_accepted(llm)
    assert (spec.outputs[0].text, spec.outputs[0].token_ids, spec.outputs[0].stop_reason) == \
        (plain.text, plain.token_ids, stop)
    assert 0.0 in spec.per_token_latency


def test_rejection_sampler_emits_the_target_distribution():
    """4000 seeded requests, each verifying draft 2 against the target rows p0 (draft position)
    and p1 (bonus) at temperature 0.7 with top-k 4: the first emitted token follows p0 (accepted
    drafts and recovered tokens together), the second (after an accepted draft) follows p1 —
    each frequency within 4.5 standard deviations, the filtered tokens never."""
    from ascendtile.runtime.rejection_sampler import RejectionSampler
    from ascendtile.runtime.sampler import Sampler
    from ascendtile.runtime.sequence import Sequence

    n, temperature = 4000, 0.7
    rows = torch.tensor([[1.0, 2.0, 0.5, 1.5, -1.0, 0.0], [0.2, -0.5, 1.0, 0.0, 2.0, 0.3]])
    sampler = Sampler(torch.device("cpu"))
    seqs = []
    for i in range(n):
        seq = Sequence(i, [3, 1], SamplingParams(temperature=temperature, top_k=4, seed=i, max_tokens=8), 64)
        sampler.add(seq)
        seqs.append(seq)
    emitted, _ = RejectionSampler(sampler)(rows.repeat(n, 1), seqs, [[2]] * n)
    targets = []
    for row in rows:
        kept = row.topk(4).indices
        p = torch.zeros(6)
        p[kept] = torch.softmax(row[kept] / temperature, 0)
        targets.append(p)
    first = torch.bincount(torch.tensor([e[0] for e in emitted]), minlength=6).double()
    second = torch.bincount(torch.tensor([e[1] for e in emitted if len(e) == 2]), minlength=6).double()
    accepted = int(second.sum())
    assert abs(accepted - n * targets[0][2]) < 4.5 * (n * targets[0][2] * (1 - targets[0][2])) ** 0.5
    for counts, p in ((first, targets[0]), (second, targets[1])):
        total = counts.sum()
        sigma = (total * p * (1 - p)).sqrt()
        assert ((counts - total * p).abs() <= 4.5 * sigma + 1e-9).all(), (counts.tolist(), (total * p).tolist())


@pytest.mark.parametrize("temperature", [0.6, 1.0, 1.7])
def test_rejection_sampler_chi_square_over_a_multi_chunk_vocabulary(temperature):
    """3000 seeded requests verify a fixed draft against fixed logits over 200 tokens (four of the
    CPU draw's 64-token chunks): the first emitted token (the accepted draft or a recovered token)
    and the bonus after an accepted draft each pass a chi-square test against softmax(row / T)."""
    from ascendtile.runtime.rejection_sampler import RejectionSampler
    from ascendtile.runtime.sampler import Sampler
    from ascendtile.runtime.sequence import Sequence
    from ops._sampling import chi2_bound

    n, vocab, draft = 3000, 200, 137
    gen = torch.Generator().manual_seed(7)
    rows = torch.randn(2, vocab, generator=gen) * torch.tensor([[1.5], [3.0]])
    rows[0, draft] = rows[0].max() + 2.5  # the draft is likely but not certain at every temperature
    sampler = Sampler(torch.device("cpu"))
    seqs = []
    for i in range(n):
        seq = Sequence(i, [3, 1], SamplingParams(temperature=temperature, seed=1000 + i, max_tokens=8), 64)
        sampler.add(seq)
        seqs.append(seq)
    emitted, _ = RejectionSampler(sampler)(rows.repeat(n, 1), seqs, [[draft]] * n)
    firsts = torch.tensor([e[0] for e in emitted])
    bonuses = torch.tensor([e[1] for e in emitted if e[0] == draft])
    for tokens, row in ((firsts, rows[0]), (bonuses, rows[1])):
        p = torch.softmax(row.double() / temperature, 0)
        expected = p * tokens.numel()
        counts = torch.bincount(tokens, minlength=vocab).double()
        big = expected >= 5  # pool the rare tokens into one cell, as the test requires
        observed = torch.cat([counts[big], counts[~big].sum()[None]])
        wanted = torch.cat([expected[big], expected[~big].sum()[None]])
        stat = float(((observed - wanted) ** 2 / wanted).sum())
        assert big.sum() >= 4 and stat < chi2_bound(int(big.sum())), (temperature, int(big.sum()), stat)
