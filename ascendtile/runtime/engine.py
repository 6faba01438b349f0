"""Engine: one scheduler step at a time — schedule, run the model, advance each scheduled
sequence past its computed chunk and commit that KV to the prefix cache, append sampled tokens,
and finish the sequences whose stop condition holds (the StopChecker decides, the engine calls
Sequence.finish, the scheduler releases the blocks). The sampler hears of each request's
arrival (its seed is fixed then), preemption and finish (its penalty counts row is freed).

With a SpeculativeConfig (n-gram drafts), a verify step emits one or more tokens per sequence:
they are appended one by one, the KV of each accepted draft counted computed as the next token
is appended (the rejected drafts' KV is never counted, so the blocks committed to the prefix
cache hold accepted tokens only), and the stop conditions are checked after each token: the
first stopping token ends the sequence and the tokens after it are dropped. spec_metrics counts
the drafts and acceptances (None without speculation).

The model is anything satisfying RuntimeModel (runtime/model_interface.py)."""
from __future__ import annotations

import time

from ascendtile.compilation import compile_model, piece_capture
from ascendtile.runtime.block_manager import BlockManager
from ascendtile.runtime.config import EngineConfig
from ascendtile.runtime.drafter import Drafter
from ascendtile.runtime.graph_runner import GraphRunner
from ascendtile.runtime.model_interface import RuntimeModel
from ascendtile.runtime.model_runner import ModelRunner
from ascendtile.runtime.sampler import Sampler
from ascendtile.runtime.sampling_params import SamplingParams
from ascendtile.runtime.scheduler import ScheduledBatch, Scheduler
from ascendtile.runtime.sequence import Sequence
from ascendtile.runtime.spec_decode_metrics import SpecDecodeMetrics
from ascendtile.runtime.stopping import StopChecker


class Engine:
    def __init__(self, model: RuntimeModel, tokenizer, eos_token_ids: set[int], config: EngineConfig, seed: int = 0) -> None:
        self.config = config
        spec = config.speculative_config
        model.allocate_kv_cache(config.num_kv_blocks, config.block_size, config.dtype, config.device,
                                config.kv_cache_dtype)
        # the runners call the model's forward; at compilation level >= 1 that is the compiled one.
        # Level 3 on NPU/CUDA captures its pieces per size instead of whole decode steps (vLLM's piecewise mode)
        capture = piece_capture(config.compilation, config.device.type, config.max_num_seqs) if config.graph != "off" else None
        model = self.model = compile_model(model, config.compilation, capture)
        self.block_manager = BlockManager(config.num_kv_blocks, config.block_size, config.enable_prefix_caching)
        self.scheduler = Scheduler(self.block_manager, config.max_num_seqs, config.max_num_batched_tokens,
                                   drafter=Drafter(spec) if spec is not None else None)
        self.spec_metrics = SpecDecodeMetrics() if spec is not None else None
        self.sampler = Sampler(config.device, seed)
        graph_runner = None
        # Only captured graphs need static, bucket-padded buffers: on CPU nothing is captured, so
        # decode batches run eagerly at their own size (padding 5 rows to 8 was pure extra work).
        if config.graph != "off" and config.device.type in ("npu", "cuda") and capture is None:
            graph_runner = GraphRunner(model, config.max_num_seqs, config.max_model_len, config.block_size,
                                       config.device, capture=True)
        self.runner = ModelRunner(model, config.block_size, config.num_kv_blocks, config.device, self.sampler,
                                  graph_runner)
        self.stop = StopChecker(tokenizer, eos_token_ids)
        self.next_seq_id = 0
        self.num_steps = 0

    def add(self, prompt_token_ids: list[int], params: SamplingParams, prompt: str | None = None) -> Sequence:
        """Queue a request; one that can never run comes back already finished ("error")."""
        seq = Sequence(self.next_seq_id, prompt_token_ids, params, self.config.max_model_len, prompt)
        self.next_seq_id += 1
        if self.scheduler.add(seq):
            self.stop.start(seq)
            self.sampler.add(seq)
        return seq

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished()

    def step(self) -> list[Sequence]:
        """Run one step; returns the sequences it finished."""
        batch = self._schedule()
        out = self.runner.execute(batch)
        self.num_steps += 1
        for seq, n in zip(batch.seqs, batch.num_new_tokens):
            seq.advance(n)
        now = time.perf_counter()
        stops = []
        drafts = {seq.seq_id: d for seq, d in zip(batch.seqs, batch.draft_token_ids)}
        for seq, tokens, logprobs in zip(out.seqs, out.token_ids, out.logprobs):
            if drafts[seq.seq_id]:
                self.spec_metrics.record(len(drafts[seq.seq_id]), len(tokens) - 1)
            for j, (token, entry) in enumerate(zip(tokens, logprobs)):
                if j:
                    seq.advance(1)  # the token before was an accepted draft: its KV was computed this step
                seq.append_token(token, entry, now)
                stop = self.stop.check(seq)
                if stop is not None:
                    stops.append((seq, stop))
                    break
        for seq in batch.seqs:
            self.block_manager.commit(seq)
        finished = []
        for seq, stop in stops:
            seq.finish(stop.reason, stop.stop_reason, text=stop.text)
            self.scheduler.finish(seq)
            self.sampler.release(seq)
            finished.append(seq)
        return finished

    def _schedule(self) -> ScheduledBatch:
        for _ in range(2):  # everything runnable may have just been preempted: the next schedule admits
            batch = self.scheduler.schedule()
            for seq in batch.preempted:
                self.sampler.suspend(seq)
            if batch.seqs:
                return batch
        raise RuntimeError("scheduler: no sequence could be scheduled")
