"""Runs a fixed script of paged steps on a model, in one process or as one rank of a
tensor-parallel group spawned by `run_ranks` (gloo on CPU). Spawned ranks write their logits to
files; the parent bounds the whole run with a timeout and kills the ranks when it passes."""
from __future__ import annotations

import time
from pathlib import Path

import torch
import torch.multiprocessing as mp

from ascendtile.distributed import destroy_tensor_parallel, init_tensor_parallel, local_init_method
from ascendtile.model import load_model
from model.helpers import PagedDriver

# Prefill three prompts in one batch, decode them (fixed tokens, so a near-tie in the logits
# cannot fork the runs), then a chunked prefill beside decodes; 13 + 5 tokens cross a 16-token block.
STEPS = [
    {0: list(range(3, 16)), 1: [5, 9, 100, 7, 2], 2: [77]},
    *({0: [10 + i], 1: [20 + i], 2: [30 + i]} for i in range(5)),
    {0: [40], 1: [41, 42, 43, 44], 2: [45]},
]


def script_logits(directory: str) -> list[torch.Tensor]:
    """The fp32 logits of every step of STEPS for the checkpoint in `directory`."""
    driver = PagedDriver(load_model(directory).model, num_seqs=3)
    return [driver.step(tokens) for tokens in STEPS]


def _rank(rank: int, world: int, init_method: str, directories: dict[str, str], out: str) -> None:
    init_tensor_parallel(world, rank, init_method, timeout_s=60)
    try:
        results = {case: script_logits(directory) for case, directory in directories.items()}
        torch.save(results, Path(out) / f"rank{rank}.pt")
    finally:
        destroy_tensor_parallel()


def run_ranks(world: int, directories: dict[str, str], out: Path, timeout_s: float = 240) -> list[dict]:
    """Each rank's {case: logits per step}; AssertionError when the ranks outlive timeout_s
    (a rank's exception is re-raised by torch.multiprocessing as ProcessRaisedException)."""
    context = mp.start_processes(_rank, args=(world, local_init_method(), directories, str(out)), nprocs=world,
                                 join=False, start_method="spawn")
    deadline = time.monotonic() + timeout_s
    while not context.join(timeout=max(0.0, deadline - time.monotonic())):
        if time.monotonic() >= deadline:
            for process in context.processes:
                process.kill()
                process.join()
            raise AssertionError(f"tensor-parallel ranks still running after {timeout_s} s")
    return [torch.load(out / f"rank{rank}.pt") for rank in range(world)]
