"""The Ascend gate: lower every kernel family over real model shapes with triton-ascend's own
compiler on this CPU and inspect the result (see gate.py)."""
