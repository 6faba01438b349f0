"""`ascendtile info | check-ascend | demo | generate | bench` — the command-line entry point.

Each subcommand lives in the module that owns its concept; this file only parses, routes and
reports errors (USAGE_ERRORS below).
"""
from __future__ import annotations

import argparse
import sys
import traceback

# What bad input raises: a ValueError / TypeError from validation (naming the argument), a
# FileNotFoundError for a model name or path that names nothing. They print as one line and exit
# 2 (with --debug after their traceback). Any other exception is a bug: it keeps its traceback.
USAGE_ERRORS = (ValueError, TypeError, FileNotFoundError)
ERRORS_HELP = ("Bad input (a value out of range, an unknown model name or family, a missing file, --chat on a "
               "model without a chat template) prints one line, 'ascendtile: error: ...', and exits with status 2; "
               "--debug prints its traceback too. Any other exception is a bug and prints its traceback.")


def _info(args: argparse.Namespace) -> int:
    from ascendtile import platform
    from ascendtile.bench.peaks import peak_rows
    from ascendtile.ops import REGISTERED, kernel_path

    kernel_path()  # a bad ASCENDTILE_KERNELS is an error, not a row that shows it
    rows = platform.report() + peak_rows() + [("ops registered", ", ".join(sorted(REGISTERED)))]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    return 0


def _check_ascend(args: argparse.Namespace) -> int:
    from ascendtile.lowering import gate

    return gate.main(sum((["--family", f] for f in args.family or ()), []) + (["--json"] if args.json else []))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ascendtile", description="Kernel-first LLM inference for Ascend NPUs.",
                                     epilog=ERRORS_HELP)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="device, versions, core counts and device peaks").set_defaults(func=_info)
    check = sub.add_parser("check-ascend", help="compile every kernel for Ascend910B4 on this machine (front end + "
                           "bishengir-compile up to hivmc): planned UB/L1/L0C, static cost, hazards")
    check.add_argument("--family", action="append", help="only this kernel family (repeatable)")
    check.add_argument("--json", action="store_true", help="reports as JSON (exit 0; the caller judges)")
    check.set_defaults(func=_check_ascend)
    from ascendtile.bench.cli import add_bench_parser
    from ascendtile.runtime.cli import add_generate_parsers

    add_bench_parser(sub)
    add_generate_parsers(sub)
    _add_debug(parser, default=False)
    return parser


def _add_debug(parser: argparse.ArgumentParser, default: bool | str) -> None:
    """--debug on the parser and on every subcommand's, so it goes before or after the command
    (a subcommand's default is SUPPRESS: it never overrides a --debug given before it)."""
    parser.add_argument("--debug", action="store_true", default=default,
                        help="on bad input, print the traceback before the one-line error")
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for subparser in action.choices.values():
                _add_debug(subparser, argparse.SUPPRESS)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except USAGE_ERRORS as exc:
        if args.debug:
            traceback.print_exc()
        message = " ".join(str(exc).split())  # one line, whatever the exception's text holds
        print(f"ascendtile: error: {message or type(exc).__name__}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
