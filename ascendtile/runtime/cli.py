"""`ascendtile generate` and `ascendtile demo`: arguments here, work in LLM. The parser part has no
heavy imports (torch and the model load only when a subcommand runs)."""
from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ascendtile.runtime.sampling_params import SamplingParams

DEMO_PROMPTS = [
    "What is the capital of France?",
    "Give me three tips for writing clear code.",
    "Explain what a KV cache is in one sentence.",
    "Write a haiku about the sea.",
]


def add_generate_parsers(sub: argparse._SubParsersAction) -> None:
    gen = sub.add_parser("generate", help="offline generation: completions plus a throughput line")
    gen.add_argument("--model", default="default", help="embedded model name ('default' = SmolLM2-135M-Instruct, "
                     "'gemma3-270m'), HF dir or .gguf")
    gen.add_argument("--prompt", action="append", required=True, help="a prompt (repeatable: one request each)")
    gen.add_argument("--chat", action="store_true", help="wrap each prompt as a user message in the chat template")
    _common(gen)
    gen.set_defaults(func=_generate)
    demo = sub.add_parser("demo", help="a few chat prompts through the embedded SmolLM2-135M-Instruct, eager "
                          "(compilation level 0: a compile costs about a minute on a CPU, longer than the demo)")
    demo.add_argument("--model", default="default", help=argparse.SUPPRESS)
    _common(demo)
    demo.set_defaults(func=_demo, chat=True, prompt=None)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--dtype", default=None,
                        help="float32 | float16 | bfloat16 (default float32; bfloat16 with --quantize w4a16)")
    parser.add_argument("--quantize", choices=("w8a8", "w4a16"), default=None,
                        help="w8a8: int8 weights and dynamic activations on every Linear but the LM head; w4a16: "
                        "4-bit weights (a GGUF's Q4 tensors as they are, float weights quantized per group)")
    parser.add_argument("--max-model-len", type=int, default=2048)
    parser.add_argument("--kv-cache-dtype", choices=("auto", "int8"), default="auto",
                        help="auto: the KV cache in --dtype; int8: int8 values with per-token scales (~half the bytes)")
    parser.add_argument("--graph", choices=("auto", "off"), default="auto")
    parser.add_argument("--compilation-level", type=int, choices=(0, 1, 2, 3), default=0,
                        help="0 eager, 1 torch.compile as is, 2 Dynamo once (one trace, no recompiles), 3 piecewise "
                        "(level 2 split at attention; pieces captured per size on NPU/CUDA); the compile line goes "
                        "to stderr")
    parser.add_argument("--tensor-parallel-size", type=int, default=1,
                        help="N > 1: the model split over N ranks (spawned worker processes, or the torchrun launch)")
    add_speculative_arguments(parser)


def add_speculative_arguments(parser: argparse.ArgumentParser) -> None:
    """--speculative-method and the fields of LLM's speculative_config (also on `bench e2e`)."""
    spec = parser.add_argument_group("speculative decoding (vLLM's speculative_config fields)")
    spec.add_argument("--speculative-method", "--speculative", dest="speculative_method", choices=("ngram",), default=None,
                      help="ngram: prompt-lookup drafts verified each step (off when not given)")
    spec.add_argument("--num-speculative-tokens", type=int, default=None, help="drafts per step (k >= 1)")
    spec.add_argument("--prompt-lookup-min", type=int, default=None, help="shortest n-gram looked up")
    spec.add_argument("--prompt-lookup-max", type=int, default=None, help="longest n-gram looked up")


SPECULATIVE_FLAGS = {"num_speculative_tokens": "--num-speculative-tokens", "prompt_lookup_min": "--prompt-lookup-min",
                     "prompt_lookup_max": "--prompt-lookup-max"}


def speculative_config_from_args(args: argparse.Namespace) -> dict | None:
    """The flags as LLM's speculative_config, checked (SpeculativeConfig's errors, named by flag)."""
    from ascendtile.runtime.speculative_config import SpeculativeConfig

    given = {field: getattr(args, field) for field in SPECULATIVE_FLAGS if getattr(args, field) is not None}
    if args.speculative_method is None:
        if given:
            raise ValueError(f"--speculative-method: required with {SPECULATIVE_FLAGS[next(iter(given))]}")
        return None
    config = {"method": args.speculative_method, **given}
    if "num_speculative_tokens" not in given:
        raise ValueError("--num-speculative-tokens: required with --speculative-method")
    try:
        SpeculativeConfig(**config)
    except (TypeError, ValueError) as exc:
        message = str(exc)
        for field, flag in SPECULATIVE_FLAGS.items():
            message = message.replace(f"speculative_config.{field}", flag)
        raise type(exc)(message) from exc
    return config


def _generate(args: argparse.Namespace) -> int:
    return _run(args, _checked_params(args))


def _checked_params(args: argparse.Namespace) -> SamplingParams:
    """The SamplingParams, after the checks that need no weights: bad input fails in a second, not
    after the model's load."""
    from ascendtile.model import chat_template
    from ascendtile.runtime.sampling_params import SamplingParams

    params = SamplingParams(temperature=args.temperature, top_p=args.top_p, max_tokens=args.max_tokens,
                            seed=args.seed)
    args.speculative_config = speculative_config_from_args(args)
    if args.chat and not chat_template(args.model):
        raise ValueError(f"--chat: model {args.model!r} has no chat template (a base model?); drop --chat and write "
                         "the prompt in the model's own turn format")
    return params


def _run(args: argparse.Namespace, params: SamplingParams) -> int:
    from ascendtile.runtime.llm import LLM

    llm = LLM(args.model, dtype=args.dtype, max_model_len=args.max_model_len, quantization=args.quantize,
              graph=args.graph, compilation_config=args.compilation_level,
              tensor_parallel_size=args.tensor_parallel_size, speculative_config=args.speculative_config,
              kv_cache_dtype=args.kv_cache_dtype)
    use_tqdm = len(args.prompt) > 1
    if args.chat:
        outputs = llm.chat([[{"role": "user", "content": p}] for p in args.prompt], params, use_tqdm=use_tqdm)
    else:
        outputs = llm.generate(args.prompt, params, use_tqdm=use_tqdm)
    for shown, out in zip(args.prompt, outputs):
        completion = out.outputs[0]
        print(f"### {shown}")
        print(completion.text if completion.finish_reason != "error" else f"[error] {out.error}")
        print(f"[{len(completion.token_ids)} tokens, finish_reason={completion.finish_reason}]\n")
    stats = llm.last_stats
    print(f"{stats.num_requests} requests, {stats.prompt_tokens} prompt + {stats.generated_tokens} generated tokens "
          f"in {stats.elapsed_s:.2f} s: {stats.tokens_per_s:.1f} tokens/s "
          f"({llm.config.device.type}, {str(llm.config.dtype).replace('torch.', '')})")
    if llm.spec_decode_metrics is not None:
        print(llm.spec_decode_metrics.describe())
    if args.compilation_level and llm.engine is not None:  # spawned ranks compile in their own processes
        print(llm.engine.model.describe(), file=sys.stderr)
    llm.shutdown()
    return 0 if all(o.outputs[0].finish_reason != "error" for o in outputs) else 1


def _demo(args: argparse.Namespace) -> int:
    args.prompt = DEMO_PROMPTS
    params = _checked_params(args)
    if not args.compilation_level:
        print("compilation level 0 (eager): compiling costs about a minute on a CPU, longer than this demo; "
              "--compilation-level 1-3 compiles", file=sys.stderr)
    return _run(args, params)
