"""`ascendkit info | check-ascend | demo | generate | bench` — the command-line entry point.

Each subcommand lives in the module that owns its concept; this file only parses and routes.
"""
from __future__ import annotations

import argparse
import sys


def _info(args: argparse.Namespace) -> int:
    from ascendkit import platform
    from ascendkit.bench.peaks import peak_rows
    from ascendkit.ops import REGISTERED

    rows = platform.report() + peak_rows() + [("ops registered", ", ".join(sorted(REGISTERED)))]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    return 0


def _check_ascend(args: argparse.Namespace) -> int:
    from ascendkit.lowering import gate

    return gate.main(sum((["--family", f] for f in args.family or ()), []) + (["--json"] if args.json else []))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ascendkit", description="Kernel-first LLM inference for Ascend NPUs.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="device, versions, core counts and device peaks").set_defaults(func=_info)
    check = sub.add_parser("check-ascend", help="compile every kernel for Ascend910B4 on this machine (front end + "
                           "bishengir-compile up to hivmc): planned UB/L1/L0C, static cost, hazards")
    check.add_argument("--family", action="append", help="only this kernel family (repeatable)")
    check.add_argument("--json", action="store_true", help="reports as JSON (exit 0; the caller judges)")
    check.set_defaults(func=_check_ascend)
    from ascendkit.bench.cli import add_bench_parser
    from ascendkit.runtime.cli import add_generate_parsers

    add_bench_parser(sub)
    add_generate_parsers(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
