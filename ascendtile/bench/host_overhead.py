"""`ascendtile bench host`: the runtime's CPU cost per decode step, on its own. The model is the
stub (bench/stub_model.py) run `free`: forward and compute_logits return preallocated hidden
states and logits at the default model's sizes, so a step's time is the scheduler, input
preparation (token/position/slot tensors, block tables, the step's metadata validation,
host-to-device copies), the decode graph runner's buffer updates (NPU/CUDA only: CPU runs
decode unpadded, with no graph runner), sampling over the real vocabulary, and the engine's bookkeeping
(advancing sequences, KV commit, appending tokens, stop checks). Batches of 1, 32 and 256
sequences; greedy, and temperature 0.8 + top-p 0.95 on two kinds of logits: the stub's standard
normal ones (flat: the nucleus holds ~32,000 of 49,152 tokens, the sampler's worst case) and the
same scaled by PEAKED (nuclei of 1 to ~150 tokens, median ~40; SmolLM2-135M's own logits on chat
prompts: median ~7, 10 % past 128, up to ~660), the last also with repetition and frequency
penalties.

`--forward hollow [--compilation-level N]` swaps the stub for the hollow model
(bench/hollow_model.py: the default model's 30 layers at widths where arithmetic is small),
greedy only, and adds the `forward` stage: mostly the host cost of one real forward at that compilation
level (Python, op dispatch, Dynamo/Inductor call path), which issue 15 bounds at 1 ms per compiled
decode step at batch 32.
"""
from __future__ import annotations

import argparse
import time
from collections import defaultdict
from pathlib import Path
from typing import Callable

import torch

from ascendtile import platform
from ascendtile.bench.hollow_model import hollow_model
from ascendtile.bench.report import format_table, write_json
from ascendtile.bench.stub_model import StubModel

QUICK = {"batch_sizes": [1, 4], "steps": 3}
PROMPT_LEN = 32
BLOCK_SIZE = 16
PEAKED = 4.5
TOP_P = {"temperature": 0.8, "top_p": 0.95}
# mode -> (SamplingParams fields, scale of the stub's standard normal logits)
MODES = {"greedy": ({"temperature": 0.0}, 1.0), "top_p": (TOP_P, 1.0), "top_p_peaked": (TOP_P, PEAKED),
         "top_p_peaked_penalties": ({**TOP_P, "repetition_penalty": 1.1, "frequency_penalty": 0.1}, PEAKED)}


class _Clock:
    """Accumulates wall time per named stage while `on`."""

    def __init__(self) -> None:
        self.on = False
        self.totals: dict[str, float] = defaultdict(float)

    def wrap(self, name: str, fn: Callable) -> Callable:
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                if self.on:
                    self.totals[name] += time.perf_counter() - start

        return timed


class _TimedCall:
    """The model with its call timed by the clock; compute_logits and the rest pass through."""

    def __init__(self, model, timed_call: Callable) -> None:
        self.model, self.timed_call = model, timed_call

    def __call__(self, *args):
        return self.timed_call(*args)

    def __getattr__(self, name: str):
        return getattr(self.model, name)


def _engine(model, batch: int, max_len: int, device: torch.device, compilation_level: int = 0,
            cpu_decode_graph: bool = False):
    from ascendtile.compilation import CompilationConfig
    from ascendtile.runtime.config import EngineConfig
    from ascendtile.runtime.engine import Engine

    blocks = batch * -(-max_len // BLOCK_SIZE)
    config = EngineConfig(max_model_len=max_len, max_num_seqs=batch, max_num_batched_tokens=max(batch * PROMPT_LEN, 512),
                          block_size=BLOCK_SIZE, num_kv_blocks=blocks, enable_prefix_caching=True, graph="auto",
                          device=device, dtype=torch.float32,
                          compilation=CompilationConfig(level=compilation_level, cpu_decode_graph=cpu_decode_graph))
    return Engine(model, None, set(), config)


def measure(model, batch: int, steps: int, mode: str, device: torch.device, compilation_level: int = 0,
            cpu_decode_graph: bool = False) -> dict:
    """Per-step stage times (µs) over `steps` decode steps of `batch` running sequences. `model`
    is the free stub or the hollow model (its forward then timed as its own stage)."""
    from ascendtile.runtime import SamplingParams

    engine = _engine(model, batch, PROMPT_LEN + steps + 3, device, compilation_level, cpu_decode_graph)
    clock = _Clock()
    hollow = not isinstance(model, StubModel)
    if hollow:
        engine.runner.model = _TimedCall(engine.runner.model, clock.wrap("forward", engine.runner.model))
    engine.scheduler.schedule = clock.wrap("schedule", engine.scheduler.schedule)
    engine.runner.prepare = clock.wrap("prepare", engine.runner.prepare)
    engine.runner.sampler = clock.wrap("sample", engine.runner.sampler)
    engine.runner.execute = clock.wrap("execute", engine.runner.execute)
    fields, _ = MODES[mode]
    params = SamplingParams(max_tokens=steps + 3, ignore_eos=True, seed=None, **fields)
    gen = torch.Generator().manual_seed(batch)
    vocab_size = model.config.vocab_size if hollow else model.vocab_size
    prompts = torch.randint(100, vocab_size, (batch, PROMPT_LEN), generator=gen).tolist()
    seqs = [engine.add(prompt, params) for prompt in prompts]
    while any(s.metrics.first_token_time is None for s in seqs):
        engine.step()  # prefill (untimed) until every sequence decodes
    engine.step()  # one untimed decode step: level 1 recompiles for the decode shapes here
    clock.on = True
    start = time.perf_counter()
    for _ in range(steps):
        engine.step()
    total = time.perf_counter() - start
    t = {k: v / steps * 1e6 for k, v in clock.totals.items()}
    stages = {
        "schedule_us": t["schedule"],
        "prepare_us": t["prepare"],
        # model calls (+ graph-runner buffer updates on NPU/CUDA); of which the hollow forward
        "model_us": t["execute"] - t["prepare"] - t["sample"],
        "forward_us": t["forward"] if hollow else None,
        "sample_us": t["sample"],
        "bookkeeping_us": total / steps * 1e6 - t["schedule"] - t["execute"],
    }
    return {"batch": batch, "mode": mode, "steps": steps, "step_us": total / steps * 1e6,
            "per_token_us": total / steps / batch * 1e6, "steps_per_s": steps / total, **stages}


def run(batch_sizes: list[int], steps: int, out_dir: Path, forward: str = "stub", compilation_level: int = 0,
        cpu_decode_graph: bool = False) -> dict:
    from ascendtile.model import default_model_path
    from ascendtile.model.loading.gguf_loader import GGUFFile

    if forward == "stub" and compilation_level:
        raise ValueError("compilation_level: only the hollow model compiles (--forward hollow)")
    config = GGUFFile(default_model_path()).config()
    device = platform.default_device()
    rows = []
    for batch in batch_sizes:
        if forward == "hollow":
            rows.append(measure(hollow_model(device).model, batch, steps, "greedy", device, compilation_level,
                                cpu_decode_graph))
            continue
        stub = StubModel(max(batch * PROMPT_LEN, 512), vocab_size=config.vocab_size, hidden_size=config.hidden_size,
                         free=True, device=device)
        normal = stub.logits
        for mode, (_, scale) in MODES.items():
            stub.logits = normal * scale if scale != 1 else normal
            rows.append(measure(stub, batch, steps, mode, device))
        stub.logits = normal
    payload = {"benchmark": "host", "forward": forward, "compilation_level": compilation_level,
               "cpu_decode_graph": cpu_decode_graph,
               "stub": {"hidden_size": config.hidden_size, "vocab_size": config.vocab_size},
               "prompt_len": PROMPT_LEN, "rows": rows}
    return write_json(out_dir / "host.json", payload)


def table(record: dict) -> str:
    headers = ["batch", "sampling", "step us", "per token us", "schedule", "prepare", "model", "forward", "sample",
               "bookkeeping"]
    body = [[r["batch"], r["mode"], r["step_us"], r["per_token_us"], r["schedule_us"], r["prepare_us"],
             r["model_us"], r["forward_us"], r["sample_us"], r["bookkeeping_us"]] for r in record["rows"]]
    stub = record["stub"]
    model = (f"hollow model (HOLLOW_WIDTHS, vocab {stub['vocab_size']}), compilation level {record['compilation_level']}"
             f"{' with the CPU decode graph' if record['cpu_decode_graph'] else ''}"
             if record["forward"] == "hollow" else f"model stubbed: hidden {stub['hidden_size']}, vocab {stub['vocab_size']}")
    return (f"host overhead per decode step on {record['context']['device']} ({model}; stage times in us per step)\n"
            + format_table(headers, body))


def main(args: argparse.Namespace) -> int:
    sizes = QUICK if args.quick else {"batch_sizes": args.batch_sizes, "steps": args.steps}
    record = run(out_dir=args.out, forward=args.forward, compilation_level=args.compilation_level,
                 cpu_decode_graph=args.cpu_decode_graph, **sizes)
    print(table(record))
    print(f"wrote {args.out / 'host.json'}")
    return 0
