"""Ops: the rejection family — speculative decoding's rejection sampler (vLLM's semantics): the
greedy check of a request's draft tokens against the target's argmax, the seeded draw of the
recovered tokens, and the seeded acceptance of drafts for sampled (non-greedy) requests.

A batch of B requests holds T = cu_num_draft_tokens[-1] draft tokens, request r's at
[cu[r - 1], cu[r]) of the flat [T] arrays (cu[-1] read as 0; a request may have none: plain
decode). Output rows (int32 [B, max_spec_len + 1]) get, for each request the op handles, its
emitted tokens (the accepted drafts, then the target's token at the first rejection, or the bonus
token after all drafts were accepted) followed by -1 (PLACEHOLDER) up to the row's end; a row the
op does not handle is left as it was.

Randomness (sampled rows) is hashed from (seeds[request], steps[position]) only, never from the
batch, like sample_tokens: the acceptance uniform with ACCEPT_SALT, the recovered draw with
RECOVER_SALT, both distinct from sample_tokens' salt, so the three draws of one (seed, step) are
independent. Acceptance is bit-exact on both paths: u (23 random bits + 0.5) / 2^23 is exact in
fp32 and a draft x is accepted iff q(x) > 0 and u · q(x) < p(x) (no division; q one-hot, i.e.
draft_probs None: u < p(x)), accepted with probability min(1, p(x) / q(x)). q(x) = 0 rejects (as
vLLM: the draft model could not have proposed x). The recovered draw is from
normalize(max(p - q, 0)) (NaN read as 0): the Triton kernel draws by Gumbel-max, the reference
(CPU) by inverse CDF with one uniform, so each is reproducible but the two may pick different
tokens for one seed (as sample_tokens).

Rules at the edges: a draft id < 0 marks a padded draft (vLLM): never accepted (greedy: no argmax
equals it), and it zeros nothing of p in the one-hot recovered draw, which is then from p itself.
When max(p - q, 0) has no positive entry (p <= q everywhere, e.g. p one-hot at the draft token
with a one-hot q; the exact sampler then accepts the draft with probability 1), the recovered
token is the draft itself, or 0 if the draft is < 0 (p then has no positive entry at all). vLLM's
kernel returns token 0 in that case; the draft is the token exact arithmetic would have kept.

Value checks (cu_num_draft_tokens non-decreasing from 0 and ending at T, each request's drafts at
most max_spec_len, draft ids below the vocabulary) run on CPU tensors, where reading them is free;
on NPU/CUDA only with ASCENDTILE_CHECK_INDICES=1 (a host sync). The kernels never trust them: a
request's span is clamped to [0, T) and to its output row, and a draft id outside [0, V) is
rejected and zeros nothing.
"""
from __future__ import annotations

import torch

from ascendtile.ops._indices import checkable
from ascendtile.ops._registry import register_op
from ascendtile.ops._validate import (BOOL, FP32, INT32, INT64, check_same_device,
                                       check_shape, check_tensor, check_vector)

PLACEHOLDER = -1  # an output slot after a row's emitted tokens (vLLM's PLACEHOLDER_TOKEN_ID)


def _check_batch(cu_num_draft_tokens: torch.Tensor, draft_token_ids: torch.Tensor) -> tuple[int, int]:
    """(B, T): the request count and the draft token count."""
    check_tensor("cu_num_draft_tokens", cu_num_draft_tokens, dtypes=INT32, ndim=1, contiguous=True)
    check_tensor("draft_token_ids", draft_token_ids, dtypes=INT32, ndim=1, contiguous=True)
    requests, tokens = cu_num_draft_tokens.shape[0], draft_token_ids.shape[0]
    if requests == 0 and tokens:
        raise ValueError(f"cu_num_draft_tokens: empty, but draft_token_ids holds {tokens} tokens")
    return requests, tokens


def _check_counts(cu_num_draft_tokens: torch.Tensor, tokens: int, width: int | None) -> None:
    """cu is an inclusive cumsum of draft counts >= 0 ending at T; with an output row width, no
    request has more than width - 1 drafts."""
    if not (checkable(cu_num_draft_tokens) and cu_num_draft_tokens.numel()):
        return
    counts = torch.diff(cu_num_draft_tokens, prepend=cu_num_draft_tokens.new_zeros(1))
    if bool((counts < 0).any()):
        raise ValueError("cu_num_draft_tokens: must be non-decreasing from >= 0 (an inclusive cumsum of draft counts)")
    if int(cu_num_draft_tokens[-1]) != tokens:
        raise ValueError(f"cu_num_draft_tokens: the last entry is {int(cu_num_draft_tokens[-1])}, expected {tokens} "
                         "(draft_token_ids' length)")
    if width is not None and int(counts.max()) > width - 1:
        raise ValueError(f"output_token_ids: rows of {width} cannot hold a request's {int(counts.max())} drafts "
                         "and its bonus token (width must be >= max drafts + 1)")


def _check_output(output_token_ids: torch.Tensor, requests: int) -> int:
    check_tensor("output_token_ids", output_token_ids, dtypes=INT32, ndim=2, contiguous=True)
    if output_token_ids.shape[0] != requests or output_token_ids.shape[1] == 0:
        raise ValueError(f"output_token_ids: expected [{requests}, max_spec_len + 1] (one row per request), "
                         f"got {tuple(output_token_ids.shape)}")
    return output_token_ids.shape[1]


def _check_probs(target_probs: torch.Tensor, draft_probs: torch.Tensor | None, tokens: int) -> int:
    """The vocabulary size V of target_probs fp32 [T, V] (and draft_probs, the same shape, if given)."""
    check_tensor("target_probs", target_probs, dtypes=FP32, ndim=2)
    if target_probs.shape[0] != tokens or target_probs.shape[1] == 0:
        raise ValueError(f"target_probs: expected [{tokens}, vocab] (one row per draft token, vocab >= 1), "
                         f"got {tuple(target_probs.shape)}")
    if draft_probs is not None:
        check_tensor("draft_probs", draft_probs, dtypes=FP32, ndim=2)
        check_shape("draft_probs", draft_probs, target_probs.shape, "same as target_probs")
    return target_probs.shape[1]


def _check_draft_ids(draft_token_ids: torch.Tensor, vocab: int) -> None:
    if checkable(draft_token_ids) and bool((draft_token_ids >= vocab).any()):
        raise ValueError(f"draft_token_ids: every id must be below {vocab} (the vocabulary; < 0 = a padded draft)")


def _validate_greedy(output_token_ids, cu_num_draft_tokens, draft_token_ids, target_argmax, bonus_token_ids,
                     is_greedy) -> None:
    requests, tokens = _check_batch(cu_num_draft_tokens, draft_token_ids)
    width = _check_output(output_token_ids, requests)
    check_vector("target_argmax", target_argmax, tokens, INT32, "one per draft token")
    check_vector("bonus_token_ids", bonus_token_ids, requests, INT32, "one per request")
    if is_greedy is not None:
        check_vector("is_greedy", is_greedy, requests, BOOL, "one per request")
    check_same_device(output_token_ids=output_token_ids, cu_num_draft_tokens=cu_num_draft_tokens,
                      draft_token_ids=draft_token_ids, target_argmax=target_argmax, bonus_token_ids=bonus_token_ids,
                      is_greedy=is_greedy)
    _check_counts(cu_num_draft_tokens, tokens, width)


def _validate_recovered(recovered_token_ids, cu_num_draft_tokens, draft_token_ids, draft_probs, target_probs, seeds,
                        steps) -> None:
    requests, tokens = _check_batch(cu_num_draft_tokens, draft_token_ids)
    check_vector("recovered_token_ids", recovered_token_ids, tokens, INT32, "one per draft token")
    vocab = _check_probs(target_probs, draft_probs, tokens)
    check_vector("seeds", seeds, requests, INT64, "one per request")
    check_vector("steps", steps, tokens, INT64, "one per draft token")
    check_same_device(recovered_token_ids=recovered_token_ids, cu_num_draft_tokens=cu_num_draft_tokens,
                      draft_token_ids=draft_token_ids, draft_probs=draft_probs, target_probs=target_probs,
                      seeds=seeds, steps=steps)
    _check_counts(cu_num_draft_tokens, tokens, None)
    _check_draft_ids(draft_token_ids, vocab)


def _validate_random(output_token_ids, cu_num_draft_tokens, draft_token_ids, draft_probs, target_probs,
                     bonus_token_ids, recovered_token_ids, seeds, steps, is_greedy) -> None:
    requests, tokens = _check_batch(cu_num_draft_tokens, draft_token_ids)
    width = _check_output(output_token_ids, requests)
    vocab = _check_probs(target_probs, draft_probs, tokens)
    check_vector("bonus_token_ids", bonus_token_ids, requests, INT32, "one per request")
    check_vector("recovered_token_ids", recovered_token_ids, tokens, INT32, "one per draft token")
    check_vector("seeds", seeds, requests, INT64, "one per request")
    check_vector("steps", steps, tokens, INT64, "one per draft token")
    check_vector("is_greedy", is_greedy, requests, BOOL, "one per request")
    check_same_device(output_token_ids=output_token_ids, cu_num_draft_tokens=cu_num_draft_tokens,
                      draft_token_ids=draft_token_ids, draft_probs=draft_probs, target_probs=target_probs,
                      bonus_token_ids=bonus_token_ids, recovered_token_ids=recovered_token_ids, seeds=seeds,
                      steps=steps, is_greedy=is_greedy)
    _check_counts(cu_num_draft_tokens, tokens, width)
    _check_draft_ids(draft_token_ids, vocab)


REJECTION_GREEDY_SAMPLE_SCHEMA = ("(Tensor! output_token_ids, Tensor cu_num_draft_tokens, Tensor draft_token_ids, "
                                  "Tensor target_argmax, Tensor bonus_token_ids, Tensor? is_greedy) -> ()")
rejection_greedy_sample_op = register_op("rejection_greedy_sample", REJECTION_GREEDY_SAMPLE_SCHEMA,
                                         validate=_validate_greedy)

SAMPLE_RECOVERED_TOKENS_SCHEMA = ("(Tensor! recovered_token_ids, Tensor cu_num_draft_tokens, Tensor draft_token_ids, "
                                  "Tensor? draft_probs, Tensor target_probs, Tensor seeds, Tensor steps) -> ()")
sample_recovered_tokens_op = register_op("sample_recovered_tokens", SAMPLE_RECOVERED_TOKENS_SCHEMA,
                                         validate=_validate_recovered)

REJECTION_RANDOM_SAMPLE_SCHEMA = ("(Tensor! output_token_ids, Tensor cu_num_draft_tokens, Tensor draft_token_ids, "
                                  "Tensor? draft_probs, Tensor target_probs, Tensor bonus_token_ids, "
                                  "Tensor recovered_token_ids, Tensor seeds, Tensor steps, Tensor is_greedy) -> ()")
rejection_random_sample_op = register_op("rejection_random_sample", REJECTION_RANDOM_SAMPLE_SCHEMA,
                                         validate=_validate_random)


def rejection_greedy_sample(cu_num_draft_tokens: torch.Tensor, draft_token_ids: torch.Tensor,
                            target_argmax: torch.Tensor, bonus_token_ids: torch.Tensor, max_spec_len: int,
                            is_greedy: torch.Tensor | None = None) -> torch.Tensor:
    """Greedy verification of B requests' drafts -> output_token_ids int32 [B, max_spec_len + 1].
    cu_num_draft_tokens int32 [B] (inclusive cumsum of draft counts); draft_token_ids and
    target_argmax (the target's argmax at each draft position) int32 [T]; bonus_token_ids int32
    [B]; is_greedy bool [B] or None (every row greedy). A greedy row emits the drafts while they
    equal the target's argmax, then the target's token at the first mismatch, or the bonus token
    after all drafts; -1 after. Other rows stay -1 (fill them with rejection_random_sample)."""
    out = torch.full((cu_num_draft_tokens.shape[0], max_spec_len + 1), PLACEHOLDER, dtype=torch.int32,
                     device=cu_num_draft_tokens.device)
    rejection_greedy_sample_op(out, cu_num_draft_tokens, draft_token_ids, target_argmax, bonus_token_ids, is_greedy)
    return out


def sample_recovered_tokens(cu_num_draft_tokens: torch.Tensor, draft_token_ids: torch.Tensor,
                            draft_probs: torch.Tensor | None, target_probs: torch.Tensor, seeds: torch.Tensor,
                            steps: torch.Tensor) -> torch.Tensor:
    """The token each draft position emits if its draft is rejected -> int32 [T]: drawn from
    normalize(max(p - q, 0)) with p = target_probs fp32 [T, V] (normalized, already processed),
    q = draft_probs fp32 [T, V] or, when None, one-hot at draft_token_ids (int32 [T]); randomness
    from (seeds[request] int64 [B], steps[position] int64 [T]) only. No positive residual: the
    draft itself (0 for a draft < 0). Kernel: Gumbel-max; CPU reference: inverse CDF — each
    reproducible, the two may pick different tokens for one seed."""
    recovered = torch.empty(draft_token_ids.shape[0], dtype=torch.int32, device=draft_token_ids.device)
    sample_recovered_tokens_op(recovered, cu_num_draft_tokens, draft_token_ids, draft_probs, target_probs, seeds, steps)
    return recovered


def rejection_random_sample(output_token_ids: torch.Tensor, cu_num_draft_tokens: torch.Tensor,
                            draft_token_ids: torch.Tensor, draft_probs: torch.Tensor | None,
                            target_probs: torch.Tensor, bonus_token_ids: torch.Tensor,
                            recovered_token_ids: torch.Tensor, seeds: torch.Tensor, steps: torch.Tensor,
                            is_greedy: torch.Tensor) -> torch.Tensor:
    """Seeded verification, in place on the rows of output_token_ids (int32 [B, max_spec_len + 1])
    whose is_greedy (bool [B]) is False: draft x at position i is accepted with probability
    min(1, p(x) / q(x)) (p = target_probs, q = draft_probs fp32 [T, V] or one-hot when None), by a
    uniform from (seeds int64 [B], steps int64 [T]); the first rejection emits
    recovered_token_ids[i] (int32 [T], sample_recovered_tokens) and stops, all accepted emit
    bonus_token_ids[r] (int32 [B]) after them; -1 after. Greedy rows are left as they were (run
    rejection_greedy_sample on the same output for them). Returns output_token_ids."""
    rejection_random_sample_op(output_token_ids, cu_num_draft_tokens, draft_token_ids, draft_probs, target_probs,
                               bonus_token_ids, recovered_token_ids, seeds, steps, is_greedy)
    return output_token_ids
