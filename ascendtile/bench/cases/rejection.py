"""rejection: each op at a decode batch of requests with K draft tokens each over real vocabularies
(probabilities peaked like a language model's; draft probabilities from a perturbed target, so
most drafts are accepted, as in a working speculator). No torch_npu fused baseline."""
from __future__ import annotations

import torch

from ascendtile.bench.cases import KernelCase, bench_cases
from ascendtile.lowering.shape_grid import VOCAB_SIZES

BATCHES = (1, 32)
DRAFTS = 4  # speculative tokens per request
QUICK = ((7, 49152),)


def _inputs(requests: int, vocab: int, device) -> dict[str, torch.Tensor]:
    tokens = requests * DRAFTS
    logits = torch.randn(tokens, vocab, device=device) * 4
    target = torch.softmax(logits, -1)
    return {
        "cu": torch.arange(1, requests + 1, dtype=torch.int32, device=device) * DRAFTS,
        "draft": target.argmax(-1).int(),
        "draft_probs": torch.softmax(logits + torch.randn_like(logits), -1),
        "target": target,
        "bonus": torch.zeros(requests, dtype=torch.int32, device=device),
        "seeds": torch.arange(requests, dtype=torch.int64, device=device),
        "steps": torch.arange(tokens, dtype=torch.int64, device=device),
    }


def _shape(requests: int, vocab: int) -> dict[str, int]:
    return {"requests": requests, "drafts": DRAFTS, "vocab": vocab}


def _greedy(requests: int, vocab: int) -> KernelCase:
    def setup(device):
        x = _inputs(requests, vocab, device)
        out = torch.empty(requests, DRAFTS + 1, dtype=torch.int32, device=device)
        return lambda: torch.ops.ascend.rejection_greedy_sample(out, x["cu"], x["draft"], x["draft"], x["bonus"], None)

    tokens = requests * DRAFTS
    return KernelCase("rejection", "rejection_greedy_sample", _shape(requests, vocab), torch.float32,
                      bytes_moved=4 * (3 * tokens + 2 * requests + requests * (DRAFTS + 1)), flops=tokens, setup=setup)


def _recovered(requests: int, vocab: int) -> KernelCase:
    def setup(device):
        x = _inputs(requests, vocab, device)
        out = torch.empty(requests * DRAFTS, dtype=torch.int32, device=device)
        return lambda: torch.ops.ascend.sample_recovered_tokens(out, x["cu"], x["draft"], x["draft_probs"], x["target"],
                                                                x["seeds"], x["steps"])

    tokens = requests * DRAFTS
    return KernelCase("rejection", "sample_recovered_tokens", _shape(requests, vocab), torch.float32,
                      bytes_moved=2 * tokens * vocab * 4 + tokens * 4,  # read p and q
                      flops=22 * tokens * vocab, setup=setup)  # subtract, log, hash, two logs, max


def _random(requests: int, vocab: int) -> KernelCase:
    def setup(device):
        x = _inputs(requests, vocab, device)
        out = torch.empty(requests, DRAFTS + 1, dtype=torch.int32, device=device)
        recovered = torch.zeros(requests * DRAFTS, dtype=torch.int32, device=device)
        greedy = torch.zeros(requests, dtype=torch.bool, device=device)
        return lambda: torch.ops.ascend.rejection_random_sample(out, x["cu"], x["draft"], x["draft_probs"], x["target"],
                                                                x["bonus"], recovered, x["seeds"], x["steps"], greedy)

    tokens = requests * DRAFTS
    return KernelCase("rejection", "rejection_random_sample", _shape(requests, vocab), torch.float32,
                      bytes_moved=4 * (6 * tokens + 3 * requests + requests * (DRAFTS + 1)),  # p(x), q(x), ids, steps
                      flops=20 * tokens, setup=setup)


@bench_cases("rejection")
def _cases(dtype: torch.dtype, quick: bool) -> list[KernelCase]:
    # Probabilities are fp32 whatever the model dtype: one set of cases.
    shapes = QUICK if quick else [(b, v) for v in VOCAB_SIZES for b in BATCHES]
    return [make(b, v) for make in (_greedy, _recovered, _random) for b, v in shapes]
