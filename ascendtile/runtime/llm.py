"""LLM: the offline entry point — vLLM's `LLM(model).generate(prompts, sampling_params)` shape.
Also `from ascendtile import LLM, SamplingParams`. It encodes and checks the requests, then runs
them on an Engine in this process (runtime/engine_args.py builds it: the model checked against
RuntimeModel / RuntimeModelConfig, the KV cache sized) or, with tensor_parallel_size N > 1, on N
spawned ranks (runtime/tp_executor.py), or as one rank of a torchrun launch."""
from __future__ import annotations

import time
from dataclasses import replace
from typing import Sequence as Seq

import torch

from ascendtile.compilation import CompilationConfig
from ascendtile.runtime.config import EngineConfig, resolve_dtype
from ascendtile.runtime.engine import Engine
from ascendtile.runtime.engine_args import EngineArgs, create_engine
from ascendtile.runtime.generation import GenerationStats, run_requests
from ascendtile.runtime.model_interface import RuntimeModel, RuntimeModelConfig
from ascendtile.runtime.outputs import RequestOutput
from ascendtile.runtime.parallel_config import check_tensor_parallel_size, join_existing_group
from ascendtile.runtime.sampling_params import SamplingParams
from ascendtile.runtime.spec_decode_metrics import SpecDecodeMetrics
from ascendtile.runtime.speculative_config import SpeculativeConfig
from ascendtile.runtime.validation import check_requests, resolve_prompt

Prompt = str | list[int] | dict  # dict: vLLM's TextPrompt / TokensPrompt (runtime/validation.py)
Conversation = list[dict]
__all__ = ["GenerationStats", "LLM"]


class LLM:
    """Offline generation with continuous batching over a paged KV cache.

    model: an embedded model name ("default" = SmolLM2-135M-Instruct, "gemma3-270m"), an HF
    directory, a .gguf file, or an
    already loaded `ascendtile.model.LoadedModel`. dtype: torch dtype or name; None (default):
    float32, bfloat16 with quantization="w4a16" (4-bit weights, 16-bit activations: see
    ascendtile.model.default_dtype). max_model_len: prompt + generated tokens per request (default: the model's
    max_position_embeddings). max_num_seqs: sequences per step; max_num_batched_tokens: tokens
    per step (longer prompts are prefilled in chunks). block_size: tokens per KV block (default:
    the platform's, 128 on NPU and 16 on CPU/CUDA: `platform.default_block_size`); the
    cache holds num_kv_blocks blocks, or as many as fit in kv_cache_memory bytes, or (default)
    90% of free NPU/CUDA memory / 1 GiB on CPU. graph: "auto" runs decode steps through the
    bucketed GraphRunner on NPU/CUDA (captured graphs; CPU runs every step eagerly, unpadded),
    "off" runs every step eagerly. quantization: None, "w8a8" or "w4a16" (ascendtile.model.load_model
    says what each converts; a quantized checkpoint loads quantized either way). kv_cache_dtype:
    vLLM's name; "auto" (the cache in dtype) or "int8" (int8 values with a dynamic fp32 scale per
    token and KV head, dequantized inside the attention kernels: about half a bf16 cache's bytes,
    so ~1.9x the blocks in the same kv_cache_memory; ops/_kv_quant.py). seed: for unseeded sampling.
    compilation_config: a CompilationConfig, a dict of its fields, or an int level (0 none, 1
    Dynamo as is, 2 Dynamo once, 3 piecewise; see ascendtile/compilation/config.py); None = level 0.
    speculative_config: None (off), a SpeculativeConfig or a dict of its fields in vLLM's names
    ({"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_min": m, "prompt_lookup_max":
    M}): each step verifies up to k n-gram (prompt lookup) drafts per decoding sequence
    (runtime/scheduler.py, runtime/rejection_sampler.py); a bad value is a ValueError/TypeError
    naming `speculative_config.<field>`. With device graphs, steps without drafts replay the
    decode graphs and verify steps run eagerly (level 3: through the per-size captured pieces).
    spec_decode_metrics: the last call's drafted / accepted counts.

    tensor_parallel_size: N ranks, each holding 1/N of the model (Megatron-style; the model must
    support it). 1 (default) runs in this process. N > 1: when this process is already a rank of
    N (launched by torchrun: WORLD_SIZE / RANK / LOCAL_RANK set, joined over env://; or a group
    from init_tensor_parallel) it runs as that rank, and every rank must make the same calls;
    otherwise N worker processes are spawned (device index = rank on NPU/CUDA; on CPU the
    parent's torch threads are split between them) and `model` must be a name or path (one that
    names nothing is a FileNotFoundError here, before any spawn). Then
    `model` and `engine` are None here: the parent keeps the tokenizer and model config, rank
    0's engine config (`config`) and no weights. tp_timeout_s bounds the workers' startup and
    every collective; a failed or dead worker is a RuntimeError naming the rank. shutdown()
    stops the workers (also done on garbage collection and at exit).
    """

    def __init__(self, model="default", dtype: torch.dtype | str | None = None, device: str | None = None,
                 max_model_len: int | None = None, max_num_seqs: int = 32, max_num_batched_tokens: int = 2048,
                 block_size: int | None = None, num_kv_blocks: int | None = None, kv_cache_memory: int | None = None,
                 enable_prefix_caching: bool = True, graph: str = "auto", quantization: str | None = None,
                 seed: int = 0, compilation_config: CompilationConfig | dict | int | None = None,
                 tensor_parallel_size: int = 1, tp_timeout_s: float = 600.0,
                 speculative_config: SpeculativeConfig | dict | None = None, kv_cache_dtype: str = "auto") -> None:
        from ascendtile import platform
        from ascendtile.model import LoadedModel, check_quantization, default_dtype, load_model, model_path
        from ascendtile.ops import check_kv_cache_dtype

        check_quantization(quantization)
        if graph not in ("auto", "off"):
            raise ValueError(f"graph: must be 'auto' or 'off', got {graph!r}")
        check_kv_cache_dtype(kv_cache_dtype)
        size = check_tensor_parallel_size(tensor_parallel_size)
        if not tp_timeout_s > 0:
            raise ValueError(f"tp_timeout_s: must be > 0, got {tp_timeout_s}")
        dev = torch.device(device) if device is not None else platform.default_device()
        run_dtype = default_dtype(quantization) if dtype is None else resolve_dtype(dtype)
        args = EngineArgs(run_dtype, dev, max_model_len, max_num_seqs, max_num_batched_tokens,
                          platform.default_block_size(dev) if block_size is None else block_size, num_kv_blocks,
                          kv_cache_memory, enable_prefix_caching, graph, quantization, seed,
                          CompilationConfig.from_user(compilation_config),
                          SpeculativeConfig.from_user(speculative_config), kv_cache_dtype)
        self.model: RuntimeModel | None = None
        self.engine: Engine | None = None
        self._executor = None
        self.last_stats: GenerationStats | None = None
        rank_dev = join_existing_group(size, dev, tp_timeout_s) if size > 1 else None
        if size > 1 and rank_dev is None:
            if isinstance(model, LoadedModel):
                raise ValueError("model: a LoadedModel holds every weight in this process; tensor_parallel_size > 1 "
                                 "needs a model name or path, which each rank loads its shard of")
            from ascendtile.runtime.tp_executor import TPExecutor  # imports the model package: lazily, as above

            model_path(str(model))  # a bad name or path fails here, not as every spawned rank's error
            self._executor = TPExecutor(str(model), args, size, tp_timeout_s)
            info = self._executor.info
            self.config: EngineConfig = info.config
            self.model_config: RuntimeModelConfig = info.model_config
            self.tokenizer = info.tokenizer
            return
        if rank_dev is not None:
            args = replace(args, device=rank_dev)
        loaded = model if isinstance(model, LoadedModel) else load_model(model, args.dtype, args.device,
                                                                          args.quantization)
        self.engine = create_engine(loaded, args)
        self.model, self.model_config, self.tokenizer = loaded.model, loaded.config, loaded.tokenizer
        self.config = self.engine.config

    def generate(self, prompts: Prompt | Seq[Prompt], sampling_params: SamplingParams | Seq[SamplingParams] | None = None,
                 use_tqdm: bool = True) -> list[RequestOutput]:
        """prompts: a raw string (no chat template applied), a list of token ids, vLLM's
        {"prompt": text} or {"prompt_token_ids": ids}, or a list of those; sampling_params: one
        for all or one per prompt. Returns one RequestOutput per prompt, in input order.

        Bad requests (as vLLM treats them; runtime/validation.py): before any request runs, a
        ValueError naming the request's index and field for an empty prompt
        (`prompts[i]`), a token id outside the vocabulary, a prompt of max_model_len tokens or
        more, and invalid sampling params such as max_tokens < 1 or an empty stop string
        (`sampling_params[i]: max_tokens: ...`). Generation that would run past max_model_len
        stops there with finish_reason "length". A request needing more KV blocks than the
        whole cache holds gets finish_reason "error" (and RequestOutput.error) while every other
        request runs as it would alone."""
        if isinstance(prompts, (str, dict)) or (isinstance(prompts, list) and prompts and isinstance(prompts[0], int)):
            prompts = [prompts]
        prompts = [resolve_prompt(i, p) for i, p in enumerate(prompts)]
        encoded = [self._encode(p, add_special_tokens=True) for p in prompts]
        return self._run(prompts, encoded, sampling_params, use_tqdm)

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

    def _encode(self, prompt: str | list[int], add_special_tokens: bool) -> list[int]:
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise ValueError("prompts: text prompts need a tokenizer; pass token ids")
            return self.tokenizer.encode(prompt, add_special_tokens=add_special_tokens)
        return prompt

    def _run(self, prompts: list, encoded: list[list[int]], sampling_params, use_tqdm: bool) -> list[RequestOutput]:
        if sampling_params is None or isinstance(sampling_params, SamplingParams):
            params = [sampling_params or SamplingParams()] * len(encoded)
        else:
            params = list(sampling_params)
            if len(params) != len(encoded):
                raise ValueError(f"sampling_params: {len(params)} given for {len(encoded)} prompts")
        check_requests(encoded, params, vocab_size=self.model_config.vocab_size,
                       max_model_len=self.config.max_model_len, has_tokenizer=self.tokenizer is not None)
        texts = [prompt if isinstance(prompt, str) else None for prompt in prompts]
        if self._executor is None:
            outputs, self.last_stats = run_requests(self.engine, texts, encoded, params, use_tqdm)
        else:  # elapsed time as the caller sees it: the pipe to the ranks included
            start = time.perf_counter()
            outputs, stats = self._executor.generate(texts, encoded, params, use_tqdm)
            self.last_stats = replace(stats, elapsed_s=time.perf_counter() - start)
        return outputs

    @property
    def spec_decode_metrics(self) -> SpecDecodeMetrics | None:
        """The last generate()/chat() call's speculative decoding counts (None without a
        speculative_config, or before the first call)."""
        return self.last_stats.spec_decode if self.last_stats is not None else None

    @property
    def num_parameters(self) -> int:
        """Parameters of the model in this process, or summed over the spawned ranks' shards
        (replicated ones, such as norms, counted once per rank)."""
        if self._executor is not None:
            return self._executor.num_parameters
        return sum(p.numel() for p in self.model.parameters())

    @property
    def worker_pids(self) -> list[int]:
        """The spawned tensor-parallel workers' process ids, rank order ([] in this process)."""
        return [] if self._executor is None else self._executor.pids

    def shutdown(self) -> None:
        """Stop and join the spawned tensor-parallel workers, if any (idempotent). Generating
        afterwards is a RuntimeError."""
        if self._executor is not None:
            self._executor.shutdown()
