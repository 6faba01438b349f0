"""Calls of our ops made by vLLM layers the plugin replaced, per op name: what proves that vLLM ran
on our ops (a layer can fall back to vLLM's own code for a form our ops do not take)."""
from __future__ import annotations

from collections import Counter

_CALLS: Counter[str] = Counter()


def count(op: str) -> None:
    _CALLS[op] += 1


def op_calls() -> dict[str, int]:
    """{op name: calls} since the process started (or since reset_op_calls)."""
    return dict(_CALLS)


def reset_op_calls() -> None:
    _CALLS.clear()
