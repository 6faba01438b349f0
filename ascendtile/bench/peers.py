"""Peers for `ascendtile bench e2e --compare`: HF transformers' batched generate and
llama.cpp (through the prebuilt `xllamacpp` wheel), on the same model file and the same prompts.

Both return a `RunResult`, the record the e2e table is built from. HF runs in the same process,
on the dequantised GGUF in the requested dtype; llama.cpp computes with the GGUF's own quantised
weights (its native path: a reference point, not a like-for-like race) or, as `llama.cpp-f32`, with
an F32 copy of the file dequantised the same way ours is (`f32_gguf.py`): the same weights in fp32.
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import torch


@dataclass
class RunResult:
    engine: str
    wall_s: float  # generate() call, prompts in -> all tokens out (model loading excluded)
    prompt_tokens: int
    output_tokens: int
    ttft_s: list[float]  # per request: request start -> first output token
    tpot_s: list[float]  # per request: mean time per output token after the first
    token_ids: list[list[int]] | None = None  # greedy outputs, to check agreement between engines (None: sampled)
    notes: list[str] = field(default_factory=list)

    @property
    def output_tok_s(self) -> float:
        return self.output_tokens / self.wall_s

    @property
    def total_tok_s(self) -> float:
        return (self.prompt_tokens + self.output_tokens) / self.wall_s


class _StepClock:
    """A transformers streamer that only timestamps: generate() puts the prompt once, then one
    token per sequence per decoding step."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def put(self, value: torch.Tensor) -> None:
        self.times.append(time.perf_counter())

    def end(self) -> None:
        pass


def run_hf(gguf_path: Path, prompts: list[list[int]], output_len: int, dtype: torch.dtype,
           device: torch.device, temperature: float = 0.0, top_p: float = 1.0) -> RunResult:
    """HF transformers on `device`, batched generate over all prompts at once (left padded),
    exactly output_len new tokens each (EOS ignored through min_new_tokens); greedy at
    temperature 0, else sampling with that temperature and top-p and nothing else (HF's default
    top-k of 50 is turned off, as ours has none)."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    model = AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name, dtype=dtype).to(device).eval()
    pad = model.config.pad_token_id if model.config.pad_token_id is not None else 0
    width = max(len(p) for p in prompts)
    input_ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    for row, prompt in enumerate(prompts):  # left padding: every prompt ends at the last column
        input_ids[row, width - len(prompt):] = torch.tensor(prompt)
        attention_mask[row, width - len(prompt):] = 1
    input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
    decoding = ({"do_sample": True, "temperature": temperature, "top_p": top_p, "top_k": 0} if temperature > 0
                else {"do_sample": False})
    clock = _StepClock()
    torch.manual_seed(0)  # HF samples from torch's global generator
    with torch.inference_mode():
        model.generate(input_ids=input_ids[:1], attention_mask=attention_mask[:1], max_new_tokens=2, pad_token_id=pad,
                       **decoding)  # warm-up, as every engine gets one
        start = time.perf_counter()
        out = model.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=output_len,
                             min_new_tokens=output_len, pad_token_id=pad, streamer=clock, **decoding)
        wall = time.perf_counter() - start
    steps = clock.times[1:]  # the first put() is the prompt itself
    ttft = steps[0] - start
    tpot = (steps[-1] - steps[0]) / (len(steps) - 1) if len(steps) > 1 else 0.0
    new = out[:, width:]
    return RunResult("hf", wall, sum(map(len, prompts)), new.numel(), [ttft] * len(prompts), [tpot] * len(prompts),
                     new.tolist(), [f"transformers batched generate, {str(dtype).removeprefix('torch.')}, left padding, "
                                    + ("sampled" if temperature > 0 else "greedy")])


def llamacpp_available() -> bool:
    try:
        import xllamacpp  # noqa: F401
    except ImportError:
        return False
    return True


def run_llamacpp(gguf_path: Path, prompts: list[list[int]], output_len: int, engine: str = "llama.cpp",
                 weights: str = "GGUF quantised weights") -> RunResult:
    """llama.cpp's server engine in process: one slot per prompt, all requests submitted at once
    (continuous batching), greedy, EOS ignored. TTFT is llama.cpp's own prompt time per request.
    engine / weights: the row's name and what the file holds (for the notes)."""
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = str(gguf_path)
    params.n_parallel = len(prompts)
    params.n_ctx = len(prompts) * (max(map(len, prompts)) + output_len + 16)  # split evenly across slots
    threads = torch.get_num_threads()
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = threads
    params.verbosity = -1
    server = xllamacpp.Server(params)

    def one(prompt: list[int]) -> dict:
        return server.handle_completions({"prompt": prompt, "max_tokens": output_len, "temperature": 0.0,
                                          "ignore_eos": True, "cache_prompt": False})

    one(prompts[0][:2])  # warm-up: the first request pays llama.cpp's one-time graph and buffer setup
    with ThreadPoolExecutor(max_workers=len(prompts)) as pool:
        start = time.perf_counter()
        replies = list(pool.map(one, prompts))
        wall = time.perf_counter() - start
    errors = [r for r in replies if "timings" not in r]
    if errors:
        raise RuntimeError(f"llama.cpp request failed: {errors[0]}")
    timings = [r["timings"] for r in replies]
    return RunResult(engine, wall, sum(t["prompt_n"] for t in timings), sum(t["predicted_n"] for t in timings),
                     [t["prompt_ms"] / 1e3 for t in timings], [t["predicted_per_token_ms"] / 1e3 for t in timings],
                     None, [f"xllamacpp, {weights}, {threads} threads, {len(prompts)} slots"])

