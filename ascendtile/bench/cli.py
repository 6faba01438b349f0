"""Arguments of `ascendtile bench kernels | e2e | host`. Kept free of heavy imports: the benchmark
modules (torch, transformers) load only when their subcommand runs."""
from __future__ import annotations

import argparse
import importlib
from pathlib import Path

from ascendtile.bench.workloads import WORKLOADS
from ascendtile.runtime.cli import add_speculative_arguments

DEFAULT_OUT = Path("bench/out")


def _route(module: str):
    def run(args: argparse.Namespace) -> int:
        if args.threads:
            import torch

            torch.set_num_threads(args.threads)
        return importlib.import_module(f"ascendtile.bench.{module}").main(args)

    return run


def add_bench_parser(sub: argparse._SubParsersAction) -> None:
    bench = sub.add_parser("bench", help="kernel microbenchmarks, end-to-end throughput, host overhead")
    which = bench.add_subparsers(dest="bench", required=True)

    kernels = which.add_parser("kernels", help="every op over real model shapes: time, GB/s, TFLOP/s, roofline PNG")
    kernels.add_argument("--family", action="append", help="only this op family (repeatable); default: all")
    kernels.add_argument("--dtype", choices=("fp16", "bf16", "fp32"), help="default: fp32 on CPU, bf16 on NPU/CUDA")
    kernels.add_argument("--min-time", type=float, default=0.2, help="seconds of timed calls per case")
    kernels.set_defaults(func=_route("kernels"))

    e2e = which.add_parser("e2e", help="offline generation throughput, TTFT/TPOT; --compare hf / llama.cpp / vllm")
    e2e.add_argument("--model", default="default", help="model name or path, as LLM(model=...) takes it")
    e2e.add_argument("--num-prompts", type=int, default=8)
    e2e.add_argument("--input-len", type=int, default=128)
    e2e.add_argument("--output-len", type=int, default=64)
    e2e.add_argument("--dtype", choices=("fp16", "bf16", "fp32"), help="default: fp32 on CPU, bf16 on NPU/CUDA")
    e2e.add_argument("--compare", action="append", default=[],
                     choices=("hf", "llama.cpp", "llama.cpp-f32", "vllm", "vllm+ascendtile"),
                     help="also run this peer on the same model, prompts and dtype (repeatable); "
                          "llama.cpp-f32: llama.cpp on an F32 copy of the GGUF (the same weights as ours in fp32); "
                          "vllm: vLLM's CPU build without plugins, vllm+ascendtile: with our plugin (both on an HF "
                          "directory of the hf peer's weights, run by --vllm-python)")
    e2e.add_argument("--vllm-mode", choices=("compiled", "eager"), default="compiled",
                     help="the vLLM peers: compiled (vLLM's defaults: its fastest setting; under Inductor the plugin's "
                          "layers run vLLM's own code, only its attention backend is ours) or eager (enforce_eager: "
                          "every layer the plugin replaces runs our op)")
    e2e.add_argument("--vllm-python", type=Path,
                     help="the Python of vLLM's venv (default: $ASCENDTILE_VLLM_PYTHON, else .venv-vllm/bin/python "
                          "here, which `make install-vllm` builds)")
    e2e.add_argument("--temperature", type=float, default=0.0,
                     help="0 (default): greedy; > 0: ours, HF and vLLM sample, and ours also runs greedy beside")
    e2e.add_argument("--top-p", type=float, default=1.0, help="with --temperature: nucleus for ours, HF and vLLM")
    e2e.add_argument("--compilation-level", type=int, choices=(0, 1, 2, 3), default=0,
                     help="ours: 0 eager, 1 torch.compile as is, 2 Dynamo once, 3 piecewise (2 and 3 compile in "
                     "the warm-up run; compiles and seconds go to the table and JSON)")
    e2e.add_argument("--rounds", type=int, default=1,
                     help="time every engine this many times, in turn each round (ours stays loaded meanwhile): each "
                          "row is the engine's median round, 'ours / this' the median of the rounds' ratios; for a "
                          "machine whose speed drifts between runs")
    e2e.add_argument("--tensor-parallel-size", type=int, default=1,
                     help="ours on N spawned ranks; reports the bytes all-reduced / all-gathered per decode step")
    e2e.add_argument("--workload", choices=WORKLOADS, default="random",
                     help="random: plain token prompts, EOS ignored (the peer comparisons); chat / copy: chat "
                     "questions / 'rewrite this paragraph with the typos fixed' through the chat template, "
                     "stopping at EOS (ours only: speculative decoding's workloads)")
    e2e.add_argument("--quantize", choices=("w8a8", "w4a16"),
                     help="ours with these weights (in --dtype, else the dtype LLM picks for them: bf16 for w4a16), "
                     "and ours with float weights in --dtype (default fp32 on CPU) beside")
    add_speculative_arguments(e2e)
    e2e.set_defaults(func=_route("e2e"))

    host = which.add_parser("host", help="scheduler + input preparation + sampling per decode step, model stubbed out")
    host.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 32, 256])
    host.add_argument("--steps", type=int, default=20, help="decode steps timed per batch size")
    host.add_argument("--forward", choices=("stub", "hollow"), default="stub",
                      help="stub: the model returns preallocated outputs; hollow: the default model's layers at "
                           "small widths, so the 'forward' stage is mostly a real forward's host cost")
    host.add_argument("--compilation-level", type=int, choices=(0, 1, 2, 3), default=0,
                      help="with --forward hollow: the forward's compilation level (compiles before the timed steps)")
    host.set_defaults(func=_route("host_overhead"))
    for parser in (e2e, host):
        parser.add_argument("--cpu-decode-graph", action="store_true",
                            help="with --compilation-level 2 on CPU: decode steps run a graph of their own with no "
                                 "opaque op (CompilationConfig.cpu_decode_graph; minutes more of compile)")

    for parser in (kernels, e2e, host):
        parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run for CI, numbers meaningless")
        parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="directory for the JSON (and PNG) results")
        parser.add_argument("--threads", type=int,
                            help="torch CPU threads (and llama.cpp's, vLLM's); default: torch's choice")
