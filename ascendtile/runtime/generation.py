"""One generate() call on an Engine: queue the (already validated) requests, step until all
finish, and build each request's RequestOutput and the call's GenerationStats. LLM runs it in
its own process, and every tensor-parallel rank runs it on the same requests."""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

from tqdm import tqdm

from ascendtile.distributed import collective_bytes
from ascendtile.runtime.engine import Engine
from ascendtile.runtime.outputs import CompletionOutput, RequestOutput
from ascendtile.runtime.sampling_params import SamplingParams
from ascendtile.runtime.sequence import Sequence
from ascendtile.runtime.spec_decode_metrics import SpecDecodeMetrics


@dataclass
class GenerationStats:
    """Totals of the last generate()/chat() call. collective_bytes: bytes this process's (with
    tensor parallelism, rank 0's) collectives moved during the call, per kind (ascendtile.distributed
    .collective_bytes; all 0 with tensor_parallel_size 1, which runs none). spec_decode: the
    call's speculative decoding counts (None without a speculative_config)."""

    num_requests: int
    prompt_tokens: int
    generated_tokens: int
    elapsed_s: float
    num_steps: int
    num_preemptions: int
    collective_bytes: dict[str, int] = field(default_factory=dict)
    spec_decode: SpecDecodeMetrics | None = None

    @property
    def tokens_per_s(self) -> float:
        return self.generated_tokens / self.elapsed_s if self.elapsed_s > 0 else 0.0


def run_requests(engine: Engine, prompts: list[str | None], encoded: list[list[int]], params: list[SamplingParams],
                 use_tqdm: bool) -> tuple[list[RequestOutput], GenerationStats]:
    """Run every request to completion. prompts: each request's text (None for token-id
    prompts), encoded: its token ids, params: its SamplingParams (lists of equal length,
    checked by runtime/validation.py). Returns the outputs in input order and the call's totals."""
    start, steps, preemptions = time.perf_counter(), engine.num_steps, engine.scheduler.num_preemptions
    moved = collective_bytes()
    drafted = replace(engine.spec_metrics) if engine.spec_metrics is not None else None
    seqs = [engine.add(ids, p, prompt) for prompt, ids, p in zip(prompts, encoded, params)]
    with tqdm(total=len(seqs), desc="Processed prompts", disable=not use_tqdm, dynamic_ncols=True) as bar:
        bar.update(sum(s.is_finished for s in seqs))
        while engine.has_unfinished():
            bar.update(len(engine.step()))
    stats = GenerationStats(
        len(seqs), sum(s.num_prompt_tokens for s in seqs), sum(s.num_output_tokens for s in seqs),
        time.perf_counter() - start, engine.num_steps - steps, engine.scheduler.num_preemptions - preemptions,
        {kind: n - moved[kind] for kind, n in collective_bytes().items()},
        engine.spec_metrics.since(drafted) if drafted is not None else None)
    return [_output(s) for s in seqs], stats


def _output(seq: Sequence) -> RequestOutput:
    times = seq.token_times
    completion = CompletionOutput(0, seq.text, seq.output_token_ids, seq.finish_reason, seq.stop_reason,
                                  seq.logprobs, seq.cumulative_logprob if seq.logprobs is not None else None)
    return RequestOutput(seq.seq_id, seq.prompt, seq.prompt_token_ids, [completion], True, seq.metrics, seq.error,
                         [b - a for a, b in zip(times, times[1:])])
