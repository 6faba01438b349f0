"""sampling: each op at a decode batch over real vocabularies, with vLLM's quick-start settings
(temperature 0.8, top-p 0.95) for processing and sampling. No torch_npu fused baseline."""
from __future__ import annotations

import torch

from ascendtile.bench.cases import KernelCase, bench_cases
from ascendtile.lowering.shape_grid import VOCAB_SIZES

BATCHES = (1, 32)
QUICK = ((7, 49152),)


def _per_row(rows: int, value: float, device, dtype=torch.float32) -> torch.Tensor:
    return torch.full((rows,), value, dtype=dtype, device=device)


def _logits(rows: int, vocab: int, device) -> torch.Tensor:
    # Peaked like a language model's: the 0.95 nucleus holds tens of tokens, not thousands.
    return torch.randn(rows, vocab, device=device) * 4


def _process(rows: int, vocab: int) -> KernelCase:
    def setup(device):
        logits = _logits(rows, vocab, device)
        work = logits.clone()
        args = (_per_row(rows, 0.8, device), _per_row(rows, 0, device, torch.int32), _per_row(rows, 0.95, device),
                _per_row(rows, 0.0, device))
        return lambda: torch.ops.ascend.process_logits(work.copy_(logits), *args)

    return KernelCase("sampling", "process_logits", {"rows": rows, "vocab": vocab}, torch.float32,
                      bytes_moved=2 * rows * vocab * 4 * 2,  # the copy, then read and write the row
                      flops=4 * rows * vocab, setup=setup)  # divide, max, exp, compare


def _sample(rows: int, vocab: int) -> KernelCase:
    def setup(device):
        logits = _logits(rows, vocab, device)
        torch.ops.ascend.process_logits(logits, _per_row(rows, 0.8, device), _per_row(rows, 0, device, torch.int32),
                                        _per_row(rows, 0.95, device), _per_row(rows, 0.0, device))
        tokens = torch.empty(rows, dtype=torch.int32, device=device)
        seeds = torch.arange(rows, dtype=torch.int64, device=device)
        return lambda: torch.ops.ascend.sample_tokens(tokens, logits, _per_row(rows, 0.8, device), seeds, seeds)

    return KernelCase("sampling", "sample_tokens", {"rows": rows, "vocab": vocab}, torch.float32,
                      bytes_moved=rows * vocab * 4 + rows * 4, flops=20 * rows * vocab,  # hash, two logs, max
                      setup=setup)


def _penalties(rows: int, vocab: int) -> KernelCase:
    def setup(device):
        logits = _logits(rows, vocab, device)
        counts = torch.randint(0, 2, (rows, vocab), dtype=torch.int32, device=device)
        prompt = torch.randint(0, 2, (rows, vocab), dtype=torch.int8, device=device)
        count_rows = torch.arange(rows, dtype=torch.int32, device=device)
        pens = [_per_row(rows, v, device) for v in (1.1, 0.2, 0.3)]
        return lambda: torch.ops.ascend.apply_penalties(logits, counts, prompt, count_rows, *pens)

    return KernelCase("sampling", "apply_penalties", {"rows": rows, "vocab": vocab}, torch.float32,
                      bytes_moved=rows * vocab * (4 + 4 + 4 + 1), flops=6 * rows * vocab, setup=setup)


def _counts(rows: int, vocab: int) -> KernelCase:
    def setup(device):
        counts = torch.zeros(rows, vocab, dtype=torch.int32, device=device)
        count_rows = torch.arange(rows, dtype=torch.int32, device=device)
        tokens = torch.randint(0, vocab, (rows,), dtype=torch.int32, device=device)
        return lambda: torch.ops.ascend.update_token_counts(counts, count_rows, tokens)

    return KernelCase("sampling", "update_token_counts", {"rows": rows, "vocab": vocab}, torch.float32,
                      bytes_moved=rows * 4 * 4, flops=rows, setup=setup)


def _logprobs(rows: int, vocab: int) -> KernelCase:
    top = 5

    def setup(device):
        logits = _logits(rows, vocab, device)
        picked = torch.arange(rows, dtype=torch.int32, device=device)
        tokens = torch.zeros(rows, dtype=torch.int32, device=device)
        out = torch.empty(rows, 1 + top, device=device)
        ids = torch.empty(rows, 1 + top, dtype=torch.int32, device=device)
        return lambda: torch.ops.ascend.gather_logprobs(out, ids, logits, picked, tokens)

    return KernelCase("sampling", "gather_logprobs", {"rows": rows, "vocab": vocab, "top": top}, torch.float32,
                      bytes_moved=rows * vocab * 4, flops=(3 + top) * rows * vocab, setup=setup)


@bench_cases("sampling")
def _cases(dtype: torch.dtype, quick: bool) -> list[KernelCase]:
    # Logits are fp32 whatever the model dtype: one set of cases.
    shapes = QUICK if quick else [(b, v) for v in VOCAB_SIZES for b in BATCHES]
    return [make(b, v) for make in (_process, _sample, _penalties, _counts, _logprobs) for b, v in shapes]
