"""`ascendtile bench e2e`: offline generation throughput of `LLM.generate` (output and total
tokens/s, TTFT and TPOT percentiles) on synthetic token prompts, optionally beside HF transformers,
llama.cpp and vLLM (without or with our plugin) on the same model file, prompts and dtype, with
the ratios. Also the compute roof: the measured GEMM throughput over 2·params FLOPs per token, and
ours as a fraction of it.

Decoding is greedy unless a temperature is given; then ours, HF and vLLM sample with the same
temperature and top-p, and ours also runs greedy in the same process (row "ascendtile greedy"),
so sampled over greedy is read off one run.

With a compilation level, ours compiles its forward; a level-2 or level-3 compile happens in the
untimed warm-up (with CPU level 2's decode graph, one for a decode batch of one and one for more),
while level 1 recompiles as shapes change, inside the timed run (as do level 3's per-size piece
captures on NPU/CUDA, each on the first step of its size). The compile count and the seconds spent
in the backend are reported beside the table and in the JSON (`compilation`); seconds of compiling
that fell inside a timed run are printed and noted in its row.

With rounds N > 1, every engine is timed N times, in turn each round (ours stays loaded meanwhile):
a row is the engine's median round and its ratio the median of the rounds' ratios, each of them
ours and the peer minutes apart, for a machine whose speed drifts between runs (a shared host).

With a tensor-parallel size N > 1, ours runs on N spawned ranks, and the bytes rank 0's
collectives move are reported: per decode step of the whole batch (the difference between two
untimed calls generating 3 and 2 tokens from the same prompts, whose prefills move the same bytes: exactly
one decode step apart) and per output token of the timed run (prefill included).
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch

from ascendtile import platform
from ascendtile.bench.f32_gguf import write_f32_gguf
from ascendtile.bench.hf_dir import write_hf_dir
from ascendtile.bench.peaks import current_peak
from ascendtile.bench.kernels import DTYPES, default_dtype
from ascendtile.bench.peers import (RunResult, llamacpp_available, run_hf, run_llamacpp, run_vllm, spinning_openmp,
                                   vllm_python)
from ascendtile.bench.report import format_table, write_json
from ascendtile.bench.workloads import WORKLOADS, conversations
from ascendtile.compilation import CompiledModel
from ascendtile.huge_pages import process_huge_page_bytes
from ascendtile.model import model_path
from ascendtile.runtime.cli import speculative_config_from_args

QUICK = {"num_prompts": 2, "input_len": 8, "output_len": 4}
# Token ids below this are the special/control tokens of the GGUF vocabularies we ship; prompts
# avoid them so no engine stops or switches templates on them.
FIRST_PLAIN_TOKEN = 100
# vLLM peers: the row name -> whether vLLM loads our plugin
VLLM_PEERS = {"vllm": False, "vllm+ascendtile": True}
# The end of a row's note on backend seconds spent inside its timed run (its speed includes them).
TIMED_COMPILE = " s of compiling inside the timed run"


def synthetic_prompts(num_prompts: int, input_len: int, vocab_size: int, seed: int = 0) -> list[list[int]]:
    """Random plain-token prompts of exactly input_len tokens (same for every engine)."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(FIRST_PLAIN_TOKEN, vocab_size, (num_prompts, input_len), generator=gen).tolist()


def workload_prompts(llm, workload: str, num_prompts: int, input_len: int) -> list[list[int]]:
    """The workload's token prompts: random ones of input_len tokens, or the chat / copy
    conversations through the model's chat template."""
    if workload == "random":
        return synthetic_prompts(num_prompts, input_len, llm.model_config.vocab_size)
    tokenizer = llm.tokenizer
    if tokenizer is None:
        raise ValueError(f"workload: {workload!r} prompts need the model's tokenizer and chat template; this model has none")
    return [tokenizer.encode(tokenizer.apply_chat_template(c, add_generation_prompt=True), add_special_tokens=False)
            for c in conversations(workload, num_prompts)]


def run_ours(llm, prompts: list[list[int]], output_len: int, temperature: float = 0.0, top_p: float = 1.0,
             engine: str = "ascendtile", ignore_eos: bool = True) -> RunResult:
    from ascendtile.runtime import SamplingParams

    params = SamplingParams(temperature=temperature, top_p=top_p, max_tokens=output_len, ignore_eos=ignore_eos)
    # Warm-up: up to two prompts that finish a step apart, so decode steps of several sequences and
    # of one both run before the clock starts: CPU level 2's decode graph compiles once for each
    # (compilation/compiled_model.py), in minutes for SmolLM2.
    warm_up = [SamplingParams(temperature=temperature, top_p=top_p, max_tokens=3 - i, ignore_eos=True)
               for i in range(min(2, len(prompts)))]
    llm.generate(prompts[:len(warm_up)], warm_up, use_tqdm=False)
    model = llm.engine.model if llm.engine is not None else None
    compiled_before = model.compile_seconds if isinstance(model, CompiledModel) else None
    start = time.perf_counter()
    outputs = llm.generate(prompts, params, use_tqdm=False)
    wall = time.perf_counter() - start
    notes = [f"LLM.generate, {platform.device_kind()}"]
    on_huge_pages = process_huge_page_bytes()
    if on_huge_pages:
        notes.append(f"{on_huge_pages >> 20} MiB of the process on huge pages (huge_pages.py)")
    if compiled_before is not None and model.compile_seconds > compiled_before:
        notes.append(f"{model.compile_seconds - compiled_before:.1f}{TIMED_COMPILE}")
    token_ids = [list(o.outputs[0].token_ids) for o in outputs]
    ttft = [o.metrics.time_to_first_token for o in outputs]
    tpot = [o.mean_per_token_latency or 0.0 for o in outputs]  # 0 when only one token was generated
    return RunResult(engine, wall, sum(map(len, prompts)), sum(map(len, token_ids)), ttft, tpot, token_ids, notes)


def percentiles(values: list[float], points: tuple[int, ...] = (50, 90, 99)) -> dict[str, float]:
    if len(values) == 1:
        return {f"p{p}": values[0] for p in points}
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return {f"p{p}": cuts[p - 1] for p in points}


def agreement(ours: list[list[int]] | None, theirs: list[list[int]] | None) -> float | None:
    """Fraction of greedy output tokens identical to ours, position by position (None when
    either side sampled: its tokens carry no agreement)."""
    if ours is None or theirs is None:
        return None
    pairs = [(a, b) for x, y in zip(ours, theirs) for a, b in zip(x, y)]
    return sum(a == b for a, b in pairs) / len(pairs) if pairs else None


def summarise(result: RunResult, ours: RunResult, ours_over_this: float) -> dict:
    return {
        "engine": result.engine, "wall_s": result.wall_s, "prompt_tokens": result.prompt_tokens,
        "output_tokens": result.output_tokens, "output_tok_s": result.output_tok_s, "total_tok_s": result.total_tok_s,
        "ttft_ms": {k: v * 1e3 for k, v in percentiles(result.ttft_s).items()},
        "tpot_ms": {k: v * 1e3 for k, v in percentiles(result.tpot_s).items()},
        "ours_over_this": ours_over_this,
        "token_agreement_with_ours": agreement(ours.token_ids, result.token_ids),
        "notes": result.notes,
    }


def median_rounds(rounds: list[list[RunResult]]) -> tuple[list[RunResult], list[float], dict[str, dict]]:
    """Rounds of rows (ours first, the engines in one order each round) -> each engine's median
    round (by output tokens/s; the lower one of an even count), the median (low) of its rounds'
    ours / this ratios, and per engine its rounds' output tokens/s and ratios."""
    rows, ratios, by_engine = [], [], {}
    for column in zip(*rounds):
        engines = {row.engine for row in column}
        assert len(engines) == 1, f"the rounds ran different engines: {sorted(engines)}"
        rows.append(sorted(column, key=lambda row: row.output_tok_s)[(len(column) - 1) // 2])
        per_round = [timed[0].output_tok_s / row.output_tok_s for timed, row in zip(rounds, column)]
        ratios.append(statistics.median_low(per_round))
        by_engine[column[0].engine] = {"output_tok_s": [row.output_tok_s for row in column], "ours_over_this": per_round}
    return rows, ratios, by_engine


def compute_roof(params: int, ours: RunResult, dtype: torch.dtype) -> dict:
    """2·params FLOPs per token (prompt or output) against the device's matrix peak; on CPU the
    peak is this machine's measured GEMM throughput in the run's dtype, or in fp32 where that is
    faster: a CPU without 16-bit dot products (AVX2) multiplies 16-bit weights widened to fp32, as
    our kernels and oneDNN do, while torch's own 16-bit GEMM there runs far below either."""
    peak = current_peak(dtype)
    if platform.device_kind() == "cpu" and dtype != torch.float32:
        widened = current_peak(torch.float32)
        if widened.matrix_tflops > peak.matrix_tflops:
            peak = replace(widened, source=f"{widened.source}, above {str(dtype).removeprefix('torch.')} GEMM's "
                                           f"{peak.matrix_tflops * 1e3:,.1f} GFLOP/s here: operands widened to fp32")
    roof_tok_s = peak.matrix_tflops * 1e12 / (2 * params)
    return {"params": params, "gemm_gflops": peak.matrix_tflops * 1e3, "peak_source": f"{peak.name}, {peak.source}",
            "roof_tok_s": roof_tok_s, "ours_total_tok_s_frac_of_roof": ours.total_tok_s / roof_tok_s}


def _greedy_only(result: RunResult, sampled: bool) -> RunResult:
    """Drops a sampled run's tokens: agreement compares greedy outputs only."""
    if sampled:
        result.token_ids = None
    return result


def _run_llamacpp_peer(peer: str, path: Path, prompts: list[list[int]], output_len: int, out_dir: Path) -> RunResult:
    """"llama.cpp" on the GGUF itself; "llama.cpp-f32" on its F32 copy (written once into out_dir)."""
    if peer == "llama.cpp":
        return run_llamacpp(path, prompts, output_len)
    f32 = write_f32_gguf(path, out_dir / f"{path.stem}.F32.gguf")
    return run_llamacpp(f32, prompts, output_len, engine=peer, weights="F32 GGUF dequantised from the same file")


def _run_vllm_peer(peer: str, path: Path, prompts: list[list[int]], output_len: int, dtype: str, python: Path,
                   out_dir: Path, temperature: float, top_p: float, eager: bool,
                   max_num_batched_tokens: int) -> RunResult:
    """vLLM reads HF directories only: a GGUF goes to it as an HF directory of HF's own dequantisation
    in `dtype` (the hf peer's weights), written once into out_dir; a directory as it is."""
    model_dir = path if path.is_dir() else write_hf_dir(path, out_dir / f"{path.stem}.{dtype}.hf", DTYPES[dtype])
    result = run_vllm(model_dir, prompts, output_len, DTYPES[dtype], python, VLLM_PEERS[peer], eager,
                      max_num_batched_tokens, temperature, top_p, engine=peer)
    if model_dir != path:
        result.notes.append(f"HF directory {model_dir} written from the GGUF by transformers")
    return result


def collective_traffic(llm, prompts: list[list[int]], timed: dict[str, int], output_tokens: int) -> dict:
    """Bytes rank 0's collectives moved per kind: in one decode step of all prompts, and per
    output token of the timed run (`timed`: its GenerationStats.collective_bytes)."""
    from ascendtile.runtime import SamplingParams

    moved = []
    for max_tokens in (2, 3):  # the same prefill, then 1 and 2 decode steps
        llm.generate(prompts, SamplingParams(max_tokens=max_tokens, ignore_eos=True), use_tqdm=False)
        moved.append(llm.last_stats.collective_bytes)
    return {"batch": len(prompts), "per_decode_step": {k: moved[1][k] - moved[0][k] for k in moved[0]},
            "per_output_token": {k: v / output_tokens for k, v in timed.items()}}


def compilation_record(model: torch.nn.Module | CompiledModel | None, level: int) -> dict:
    """Level, compiles and backend seconds of the engine's model (a CompiledModel above level 0;
    None when the model runs in spawned tensor-parallel ranks, which do not report them)."""
    if model is None:
        return {"level": level, "num_compiles": None, "compile_s": None,
                "summary": f"compilation level {level} in each tensor-parallel rank (not reported back)"}
    if not isinstance(model, CompiledModel):
        return {"level": 0, "num_compiles": 0, "compile_s": 0.0, "summary": "compilation level 0 (NO_COMPILATION): eager"}
    return {"level": int(model.config.level), "num_compiles": model.backend.num_compiles,
            "compile_s": model.compile_seconds, "summary": model.describe()}


def run(model: str, num_prompts: int, input_len: int, output_len: int, dtype: str, compare: list[str], out_dir: Path,
        temperature: float = 0.0, top_p: float = 1.0, compilation_level: int = 0, cpu_decode_graph: bool = False,
        tensor_parallel_size: int = 1, vllm_interpreter: Path | None = None, vllm_eager: bool = False,
        speculative_config: dict | None = None, workload: str = "random", quantization: str | None = None,
        quantized_dtype: str | None = None, rounds: int = 1) -> dict:
    """vllm_interpreter: the Python of vLLM's venv (default: see peers.vllm_python); vllm_eager:
    the vLLM peers with enforce_eager (else vLLM's default compilation, its fastest setting);
    speculative_config: ours with LLM's speculative_config, and ours without it beside as the row
    "ascendtile (no speculation)" (the peers run without); workload: bench/workloads.py (chat and
    copy: chat-template prompts of their own lengths, input_len unused, stopping at EOS; the
    peers run the random workload only). quantization: ours with LLM's quantization in
    quantized_dtype (None: the dtype LLM picks for it, bfloat16 for "w4a16"), and ours with float
    weights in `dtype` beside as the row "ascendtile (float weights)"; the peers run `dtype` on
    float weights (llama.cpp on the GGUF's own blocks). rounds: every engine is timed that many
    times, in turn each round (ours, then the others; ours stays loaded while they run, except in
    the last round, which frees it first); the rows are each engine's median round and the median
    of its rounds' ratios (median_rounds), the JSON's `rounds_by_engine` every round. The peers with
    threads of their own (all but hf) are refused, with the setting named, where this process's idle
    OpenMP threads would spin on through their turn (peers.spinning_openmp)."""
    from ascendtile.runtime import LLM

    if rounds < 1:
        raise ValueError(f"rounds: at least 1, got {rounds}")
    if workload not in WORKLOADS:
        raise ValueError(f"workload: expected one of {', '.join(WORKLOADS)}, got {workload!r}")
    if workload != "random" and compare:
        raise ValueError(f"workload: the peers ({', '.join(compare)}) run the random workload only, got {workload!r}")
    threaded_peers = [peer for peer in compare if peer != "hf"]
    spinning = spinning_openmp(os.environ) if threaded_peers else None
    if spinning is not None:
        raise ValueError(f"{spinning}: this process's OpenMP threads would keep spinning on the cores that "
                         f"{', '.join(threaded_peers)} then run on, slowing them; unset it, or compare with hf only")

    path = model_path(model)
    max_num_batched_tokens = max(num_prompts * input_len, 512)
    # No prefix cache: the greedy run beside a sampled one repeats the same prompts, and a cache hit
    # would skip its prefill (the peers have no such cache), so every run starts cold.
    def ours_llm(speculative: dict | None, quantized: bool):
        run_dtype = dtype if not quantized else quantized_dtype
        return LLM(model=model, dtype=None if run_dtype is None else DTYPES[run_dtype], max_num_seqs=num_prompts,
                   max_num_batched_tokens=max_num_batched_tokens,
                   compilation_config={"level": compilation_level, "cpu_decode_graph": cpu_decode_graph},
                   tensor_parallel_size=tensor_parallel_size, enable_prefix_caching=False,
                   speculative_config=speculative, quantization=quantization if quantized else None)

    def run_peer(peer: str) -> RunResult | str:
        """One timed run of the peer, or why it cannot run here."""
        if peer == "hf":
            return run_hf(path, prompts, output_len, DTYPES[dtype], platform.default_device(), temperature, top_p)
        if peer in VLLM_PEERS:
            python = vllm_python(vllm_interpreter)
            if not python.is_file():
                return (f"no vLLM Python at {python} (make install-vllm builds .venv-vllm; or --vllm-python / "
                        "ASCENDTILE_VLLM_PYTHON)")
            return _run_vllm_peer(peer, path, prompts, output_len, dtype, python, out_dir, temperature, top_p,
                                  vllm_eager, max_num_batched_tokens)
        if not llamacpp_available():
            return "xllamacpp is not installed (pip install xllamacpp)"
        if sampled:
            return "the llama.cpp peer decodes greedily only"
        if path.suffix != ".gguf":
            return f"llama.cpp needs a .gguf model, got {path}"
        return _run_llamacpp_peer(peer, path, prompts, output_len, out_dir)

    llm = ours_llm(speculative_config, quantization is not None)
    ours_dtype = str(llm.config.dtype).removeprefix("torch.")
    params = llm.num_parameters
    prompts = workload_prompts(llm, workload, num_prompts, input_len)
    sampled, ignore_eos = temperature > 0, workload == "random"
    baselines = {"ascendtile (no speculation)": speculative_config is not None,
                 "ascendtile (float weights)": quantization is not None}
    timed, skipped = [], {}
    for round_index in range(rounds):
        ours = _greedy_only(run_ours(llm, prompts, output_len, temperature, top_p, ignore_eos=ignore_eos), sampled)
        results = [ours]
        if round_index == 0:
            num_preemptions = llm.last_stats.num_preemptions  # of the measured generate() call
            spec = llm.spec_decode_metrics
            spec_decode = None if spec is None else {
                "config": speculative_config, **asdict(spec), "acceptance_rate": spec.acceptance_rate,
                "mean_acceptance_length": spec.mean_acceptance_length, "summary": spec.describe()}
            collectives = None
            if tensor_parallel_size > 1:
                collectives = collective_traffic(llm, prompts, llm.last_stats.collective_bytes, ours.output_tokens)
        if tensor_parallel_size > 1:
            ours.notes.append(f"tensor parallel size {tensor_parallel_size} (spawned ranks)")
        if sampled:
            results.append(run_ours(llm, prompts, output_len, engine="ascendtile greedy", ignore_eos=ignore_eos))
        if round_index == rounds - 1:
            compilation = compilation_record(llm.engine.model if llm.engine is not None else None, compilation_level)
            llm.shutdown()
            del llm  # free its KV cache before a peer loads its own copy of the model
        for engine in (name for name, wanted in baselines.items() if wanted):
            base = ours_llm(None, False)
            if quantization is not None:
                params = base.num_parameters  # the roof counts weights, not the bytes W4A16 packs them in
            results.append(_greedy_only(run_ours(base, prompts, output_len, temperature, top_p, ignore_eos=ignore_eos,
                                                 engine=engine), sampled))
            results[-1].notes.append(f"float weights, {str(base.config.dtype).removeprefix('torch.')}")
            base.shutdown()
            del base
        for peer in compare:
            result = run_peer(peer)
            if isinstance(result, str):
                skipped[peer] = result
            else:
                results.append(_greedy_only(result, sampled))
        timed.append(results)
    results, ratios, by_engine = median_rounds(timed)
    ours = results[0]
    payload = {
        "benchmark": "e2e", "model": str(path), "dtype": dtype, "num_prompts": num_prompts, "input_len": input_len,
        "output_len": output_len, "workload": workload, "temperature": temperature, "top_p": top_p, "num_preemptions": num_preemptions,
        "compilation": compilation, "tensor_parallel_size": tensor_parallel_size, "collectives": collectives,
        "spec_decode": spec_decode, "quantization": None if quantization is None else {
            "method": quantization, "dtype": ours_dtype},
        "rows": [summarise(r, ours, ratio) for r, ratio in zip(results, ratios)], "skipped": skipped,
        "rounds": rounds, "rounds_by_engine": by_engine,
        "roof": compute_roof(params, ours, DTYPES[dtype]), "device": platform.device_kind(), "isa": platform.cpu_isa(),
        "cpu_vendor": platform.cpu_vendor(),
    }
    return write_json(out_dir / "e2e.json", payload)


def table(record: dict) -> str:
    headers = ["engine", "out tok/s", "total tok/s", "TTFT p50 ms", "TTFT p99 ms", "TPOT p50 ms", "TPOT p99 ms",
               "ours / this", "same tokens"]
    body = [[r["engine"], r["output_tok_s"], r["total_tok_s"], r["ttft_ms"]["p50"], r["ttft_ms"]["p99"],
             r["tpot_ms"]["p50"], r["tpot_ms"]["p99"], r["ours_over_this"], r["token_agreement_with_ours"]]
            for r in record["rows"]]
    roof = record["roof"]
    decoding = (f"sampled (temperature {record['temperature']}, top-p {record['top_p']})" if record["temperature"] > 0
                else "greedy")
    workload = record.get("workload", "random")
    shape = (f"{record['num_prompts']} prompts x {record['input_len']} in / {record['output_len']} out, {decoding}, "
             "EOS ignored" if workload == "random" else
             f"{workload} workload, {record['num_prompts']} prompts (chat template), up to {record['output_len']} out, "
             f"{decoding}, stopping at EOS")
    lines = [
        f"e2e: {record['model']} ({record['dtype']}), {shape}; {record['num_preemptions']} preemptions (ascendtile); "
        f"device {record['device']}, CPU ISA {record['isa']} ({record['cpu_vendor']})",
        format_table(headers, body),
        f"ascendtile {record['compilation']['summary']}",
        f"compute roof: {roof['gemm_gflops']:,.1f} GFLOP/s GEMM ({roof['peak_source']}) / (2 x {roof['params'] / 1e6:,.1f} M params)"
        f" = {roof['roof_tok_s']:,.0f} tokens/s; ours {roof['ours_total_tok_s_frac_of_roof']:.1%} of it (total tokens)",
    ]
    if record["rounds"] > 1:
        lines.append(f"{record['rounds']} rounds, the engines in turn each round: a row is the engine's median round (by out "
                     "tok/s), 'ours / this' the median of its rounds' ratios")
        lines += [f"  {engine}: out tok/s {', '.join(f'{v:,.1f}' for v in runs['output_tok_s'])}; ours / this "
                  f"{', '.join(f'{v:.3f}' for v in runs['ours_over_this'])}"
                  for engine, runs in record["rounds_by_engine"].items() if engine != "ascendtile"]
        lines.append(f"  ascendtile: out tok/s {', '.join(f'{v:,.1f}' for v in record['rounds_by_engine']['ascendtile']['output_tok_s'])}")
    if record.get("quantization"):
        q = record["quantization"]
        lines.append(f"ascendtile: {q['method']} weights, {q['dtype']} activations; the other rows float weights")
    if record.get("spec_decode"):
        lines.append(f"ascendtile {record['spec_decode']['summary']}")
    traffic = record.get("collectives")
    if traffic:
        step, token = traffic["per_decode_step"], traffic["per_output_token"]
        lines.append(f"tensor parallel {record['tensor_parallel_size']} (rank 0): per decode step of {traffic['batch']} "
                     f"sequences {step['all_reduce']:,} B all-reduced + {step['all_gather']:,} B all-gathered; per output "
                     f"token of the timed run {token['all_reduce']:,.0f} B + {token['all_gather']:,.0f} B")
    # the vLLM rows' settings, with or without our plugin (and its op calls)
    lines += [f"{row['engine']}: {'; '.join(row['notes'])}" for row in record["rows"] if row["engine"] in VLLM_PEERS]
    lines += [f"{row['engine']}: {note}" for row in record["rows"] for note in row["notes"] if note.endswith(TIMED_COMPILE)]
    lines += [f"skipped {peer}: {why}" for peer, why in record["skipped"].items()]
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    sizes = QUICK if args.quick else {"num_prompts": args.num_prompts, "input_len": args.input_len, "output_len": args.output_len}
    record = run(args.model, dtype=args.dtype or default_dtype(), compare=args.compare, out_dir=args.out,
                 temperature=args.temperature, top_p=args.top_p, compilation_level=args.compilation_level,
                 cpu_decode_graph=args.cpu_decode_graph,
                 tensor_parallel_size=args.tensor_parallel_size, vllm_interpreter=args.vllm_python,
                 vllm_eager=args.vllm_mode == "eager", speculative_config=speculative_config_from_args(args),
                 workload=args.workload, quantization=args.quantize, quantized_dtype=args.dtype, rounds=args.rounds,
                 **sizes)
    print(table(record))
    print(f"wrote {args.out / 'e2e.json'}")
    return 0
