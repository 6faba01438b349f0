"""LLM: the offline entry point — vLLM's `LLM(model).generate(prompts, sampling_params)` shape.
Also `from ascendkit import LLM, SamplingParams`. It loads (or takes) the model, checks it against
RuntimeModel / RuntimeModelConfig (runtime/model_interface.py), sizes the KV cache and drives the
Engine; a request's RequestOutput is built from its finished Sequence."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence as Seq

import torch
from tqdm import tqdm

from ascendkit.compilation import CompilationConfig
from ascendkit.runtime.config import EngineConfig, kv_cache_blocks, resolve_dtype
from ascendkit.runtime.engine import Engine
from ascendkit.runtime.model_interface import RuntimeModel, RuntimeModelConfig, require
from ascendkit.runtime.outputs import CompletionOutput, RequestOutput
from ascendkit.runtime.sampling_params import SamplingParams
from ascendkit.runtime.sequence import Sequence
from ascendkit.runtime.validation import check_requests

Prompt = str | list[int]
Conversation = list[dict]


@dataclass
class GenerationStats:
    """Totals of the last generate()/chat() call."""

    num_requests: int
    prompt_tokens: int
    generated_tokens: int
    elapsed_s: float
    num_steps: int
    num_preemptions: int

    @property
    def tokens_per_s(self) -> float:
        return self.generated_tokens / self.elapsed_s if self.elapsed_s > 0 else 0.0


class LLM:
    """Offline generation with continuous batching over a paged KV cache.

    model: an embedded model name ("default" = SmolLM2-135M-Instruct, "gemma3-270m"), an HF
    directory, a .gguf file, or an
    already loaded `ascendkit.model.LoadedModel`. dtype: torch dtype or name ("float32" on
    CPU). max_model_len: prompt + generated tokens per request (default: the model's
    max_position_embeddings). max_num_seqs: sequences per step; max_num_batched_tokens: tokens
    per step (longer prompts are prefilled in chunks). block_size: tokens per KV block (default:
    the platform's, 128 on NPU and 16 on CPU/CUDA: `platform.default_block_size`); the
    cache holds num_kv_blocks blocks, or as many as fit in kv_cache_memory bytes, or (default)
    90% of free NPU/CUDA memory / 1 GiB on CPU. graph: "auto" runs decode steps through the
    bucketed GraphRunner on NPU/CUDA (captured graphs; CPU runs every step eagerly, unpadded),
    "off" runs every step eagerly. quantization: None or "w8a8". seed: for unseeded sampling.
    compilation_config: a CompilationConfig, a dict of its fields, or an int level (0 none, 1
    Dynamo as is, 2 Dynamo once; see ascendkit/compilation/config.py); None = level 0.
    """

    def __init__(self, model="default", dtype: torch.dtype | str = torch.float32, device: str | None = None,
                 max_model_len: int | None = None, max_num_seqs: int = 32, max_num_batched_tokens: int = 2048,
                 block_size: int | None = None, num_kv_blocks: int | None = None, kv_cache_memory: int | None = None,
                 enable_prefix_caching: bool = True, graph: str = "auto", quantization: str | None = None,
                 seed: int = 0, compilation_config: CompilationConfig | dict | int | None = None) -> None:
        from ascendkit import platform
        from ascendkit.model import LoadedModel, load_model

        if graph not in ("auto", "off"):
            raise ValueError(f"graph: must be 'auto' or 'off', got {graph!r}")
        dtype = resolve_dtype(dtype)
        compilation = CompilationConfig.from_user(compilation_config)
        dev = torch.device(device) if device is not None else platform.default_device()
        block_size = platform.default_block_size(dev) if block_size is None else block_size
        loaded = model if isinstance(model, LoadedModel) else load_model(model, dtype, dev, quantization)
        require(loaded.model, RuntimeModel, "model")
        require(loaded.config, RuntimeModelConfig, "model")
        self.model: RuntimeModel = loaded.model
        self.model_config: RuntimeModelConfig = loaded.config
        self.tokenizer = loaded.tokenizer
        limit = self.model_config.max_position_embeddings
        max_model_len = limit if max_model_len is None else max_model_len
        if not 1 < max_model_len <= limit:
            raise ValueError(f"max_model_len: must be in [2, {limit}] (the model's max_position_embeddings)")
        bytes_per_block = self.model.kv_cache_bytes_per_block(block_size, dtype)
        blocks = kv_cache_blocks(bytes_per_block, dev, num_blocks=num_kv_blocks, memory_bytes=kv_cache_memory,
                                 max_model_len=max_model_len, max_num_seqs=max_num_seqs, block_size=block_size,
                                 activation_bytes=max_num_batched_tokens * self.model_config.vocab_size * 4)
        self.config = EngineConfig(max_model_len, max_num_seqs, max_num_batched_tokens, block_size, blocks,
                                   enable_prefix_caching, graph, dev, dtype, compilation)
        eos = set(self.tokenizer.eos_token_ids) if self.tokenizer is not None else set()
        eos |= set(self.model_config.eos_token_id or [])
        self.engine = Engine(self.model, self.tokenizer, eos, self.config, seed)
        self.last_stats: GenerationStats | None = None

    def generate(self, prompts: Prompt | Seq[Prompt], sampling_params: SamplingParams | Seq[SamplingParams] | None = None,
                 use_tqdm: bool = True) -> list[RequestOutput]:
        """prompts: a raw string (no chat template applied), a list of token ids, or a list of
        either; sampling_params: one for all or one per prompt. Returns one RequestOutput per
        prompt, in input order.

        Bad requests (as vLLM treats them; runtime/validation.py): before any request runs, a
        ValueError naming the request's index and field for an empty prompt
        (`prompts[i]`), a token id outside the vocabulary, a prompt of max_model_len tokens or
        more, and invalid sampling params such as max_tokens < 1 or an empty stop string
        (`sampling_params[i]: max_tokens: ...`). Generation that would run past max_model_len
        stops there with finish_reason "length". A request needing more KV blocks than the
        whole cache holds gets finish_reason "error" (and RequestOutput.error) while every other
        request runs as it would alone."""
        if isinstance(prompts, str) or (isinstance(prompts, list) and prompts and isinstance(prompts[0], int)):
            prompts = [prompts]
        encoded = [self._encode(p, add_special_tokens=True) for p in prompts]
        return self._run(list(prompts), encoded, sampling_params, use_tqdm)

    def chat(self, messages: Conversation | Seq[Conversation], sampling_params=None, use_tqdm: bool = True,
             add_generation_prompt: bool = True) -> list[RequestOutput]:
        """messages: one conversation ([{"role": ..., "content": ...}, ...]) or a list of them;
        each is rendered with the model's chat template, then generated like generate()."""
        if self.tokenizer is None:
            raise ValueError("messages: chat needs a tokenizer; this model has none")
        conversations = [messages] if messages and isinstance(messages[0], dict) else list(messages)
        texts = [self.tokenizer.apply_chat_template(c, add_generation_prompt=add_generation_prompt) for c in conversations]
        # the template already carries the special tokens (BOS etc.)
        return self._run(texts, [self._encode(t, add_special_tokens=False) for t in texts], sampling_params, use_tqdm)

    def _encode(self, prompt: Prompt, add_special_tokens: bool) -> list[int]:
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise ValueError("prompts: text prompts need a tokenizer; pass token ids")
            return self.tokenizer.encode(prompt, add_special_tokens=add_special_tokens)
        return [int(t) for t in prompt]

    def _run(self, prompts: list, encoded: list[list[int]], sampling_params, use_tqdm: bool) -> list[RequestOutput]:
        if sampling_params is None or isinstance(sampling_params, SamplingParams):
            params = [sampling_params or SamplingParams()] * len(encoded)
        else:
            params = list(sampling_params)
            if len(params) != len(encoded):
                raise ValueError(f"sampling_params: {len(params)} given for {len(encoded)} prompts")
        check_requests(encoded, params, vocab_size=self.model_config.vocab_size,
                       max_model_len=self.config.max_model_len, has_tokenizer=self.tokenizer is not None)
        start, steps, preemptions = time.perf_counter(), self.engine.num_steps, self.engine.scheduler.num_preemptions
        seqs = [self.engine.add(ids, p, prompt if isinstance(prompt, str) else None)
                for prompt, ids, p in zip(prompts, encoded, params)]
        with tqdm(total=len(seqs), desc="Processed prompts", disable=not use_tqdm, dynamic_ncols=True) as bar:
            bar.update(sum(s.is_finished for s in seqs))
            while self.engine.has_unfinished():
                bar.update(len(self.engine.step()))
        self.last_stats = GenerationStats(
            len(seqs), sum(s.num_prompt_tokens for s in seqs), sum(s.num_output_tokens for s in seqs),
            time.perf_counter() - start, self.engine.num_steps - steps,
            self.engine.scheduler.num_preemptions - preemptions)
        return [_output(s) for s in seqs]


def _output(seq: Sequence) -> RequestOutput:
    times = seq.token_times
    completion = CompletionOutput(0, seq.text, seq.output_token_ids, seq.finish_reason, seq.stop_reason,
                                  seq.logprobs, seq.cumulative_logprob if seq.logprobs is not None else None)
    return RequestOutput(seq.seq_id, seq.prompt, seq.prompt_token_ids, [completion], True, seq.metrics, seq.error,
                         [b - a for a, b in zip(times, times[1:])])
