"""Rejection sampling kernels (speculative decoding; rules: ascendtile/ops/rejection.py). Persistent
over requests: a program takes a request's whole output row, walking its drafts in order, so the
first rejection ends the row without any cross-program state.

Greedy and random verification are scalar kernels (a few loads per draft). Each output slot is
written exactly once — the emitted token while the row is alive, -1 after — by a loop over the
row's width, so nothing has to be filled first. The recovered draw reads each draft position's
target (and draft) row in BLOCK-wide chunks: Gumbel-max over log(max(p - q, 0)) with noise
hashed from (seed, step, vocab position) under RECOVER_SALT; ties go to the lowest id.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ascendtile.kernels._reduce import fast_max, fast_min
from ascendtile.kernels._rng import gumbel, salted_key, unit_uniform
from ascendtile.platform import grid_size

BLOCK = 1024  # fp32 vocabulary chunk of the recovered draw (2048 plans 185 KB of UB)
NO_INDEX = tl.constexpr(16777216.0)  # 2^24: above any vocabulary position, exact in fp32
PLACEHOLDER = tl.constexpr(-1)
# ascendtile/ops/reference/rejection.py holds the same; sample_tokens' salt is _rng.STEP_SALT.
ACCEPT_SALT = tl.constexpr(0x6A09E667)
RECOVER_SALT = tl.constexpr(0x3C6EF372)


@triton.jit
def _span(cu_ptr, r, n_tokens):
    """Request r's drafts [start, end), clamped into [0, n_tokens) (cu is never trusted)."""
    before = tl.load(cu_ptr + tl.maximum(r - 1, 0))
    start = tl.minimum(tl.maximum(tl.where(r > 0, before, 0), 0), n_tokens)
    end = tl.minimum(tl.maximum(tl.load(cu_ptr + r), start), n_tokens)
    return start, end


@triton.jit(do_not_specialize=["n_requests", "n_tokens", "width"])
def rejection_greedy_sample_kernel(
    out_ptr, cu_ptr, draft_ptr, target_ptr, bonus_ptr, is_greedy_ptr, n_requests, n_tokens, width,
    ALL_GREEDY: tl.constexpr,
):
    for r in range(tl.program_id(0), n_requests, tl.num_programs(0)):
        if ALL_GREEDY:
            greedy = True
        else:
            greedy = tl.load(is_greedy_ptr + r) != 0
        if greedy:
            start, end = _span(cu_ptr, r, n_tokens)
            count = tl.minimum(end - start, width - 1)  # never past the row: the bonus needs a slot
            bonus = tl.load(bonus_ptr + r)
            out_row = out_ptr + tl.cast(r, tl.int64) * width
            alive = 1
            for j in range(0, width):
                in_drafts = j < count
                draft = tl.load(draft_ptr + start + j, mask=in_drafts, other=-1)
                target = tl.load(target_ptr + start + j, mask=in_drafts, other=-1)
                token = tl.where(in_drafts, target, bonus)  # an accepted draft equals the target
                tl.store(out_row + j, tl.where(alive != 0, token, PLACEHOLDER))
                alive = alive & (in_drafts & (draft == target)).to(tl.int32)


@triton.jit(do_not_specialize=["n_requests", "n_tokens", "width", "vocab", "stride", "draft_stride"])
def rejection_random_sample_kernel(
    out_ptr, cu_ptr, draft_ptr, draft_probs_ptr, target_probs_ptr, bonus_ptr, recovered_ptr, seeds_ptr, steps_ptr,
    is_greedy_ptr, n_requests, n_tokens, width, vocab, stride, draft_stride, ONE_HOT: tl.constexpr,
):
    for r in range(tl.program_id(0), n_requests, tl.num_programs(0)):
        if tl.load(is_greedy_ptr + r) == 0:
            start, end = _span(cu_ptr, r, n_tokens)
            count = tl.minimum(end - start, width - 1)
            seed = tl.load(seeds_ptr + r)
            bonus = tl.load(bonus_ptr + r)
            out_row = out_ptr + tl.cast(r, tl.int64) * width
            alive = 1
            for j in range(0, width):
                in_drafts = j < count
                i = start + j
                draft = tl.load(draft_ptr + i, mask=in_drafts, other=-1)
                valid = in_drafts & (draft >= 0) & (draft < vocab)  # < 0: a padded draft, rejected
                col = tl.where(valid, draft, 0)
                p = tl.load(target_probs_ptr + tl.cast(i, tl.int64) * stride + col, mask=valid, other=0.0)
                if ONE_HOT:
                    q = 1.0
                else:
                    q = tl.load(draft_probs_ptr + tl.cast(i, tl.int64) * draft_stride + col, mask=valid, other=0.0)
                u = unit_uniform(salted_key(seed, tl.load(steps_ptr + i, mask=in_drafts, other=0), ACCEPT_SALT))
                # u * q < p, not u < p / q: no division, so every device and the reference decide alike
                accepted = valid & (q > 0.0) & (u * q < p)
                recovered = tl.load(recovered_ptr + i, mask=in_drafts, other=-1)
                token = tl.where(in_drafts, tl.where(accepted, draft, recovered), bonus)
                tl.store(out_row + j, tl.where(alive != 0, token, PLACEHOLDER))
                alive = alive & accepted.to(tl.int32)


@triton.jit(do_not_specialize=["n_requests", "n_tokens", "stride", "draft_stride"])
def sample_recovered_tokens_kernel(
    recovered_ptr, cu_ptr, draft_ptr, draft_probs_ptr, target_probs_ptr, seeds_ptr, steps_ptr, n_requests, n_tokens,
    stride, draft_stride, V: tl.constexpr, BLOCK: tl.constexpr, ONE_HOT: tl.constexpr,
):
    offs = tl.arange(0, BLOCK)
    for r in range(tl.program_id(0), n_requests, tl.num_programs(0)):
        start, end = _span(cu_ptr, r, n_tokens)
        seed = tl.load(seeds_ptr + r)
        for i in range(start, end):
            draft = tl.load(draft_ptr + i)
            draft_id = draft.to(tl.float32)  # compared in fp32: int vector compares are scalar code on Ascend
            key = salted_key(seed, tl.load(steps_ptr + i), RECOVER_SALT)
            p_row = target_probs_ptr + tl.cast(i, tl.int64) * stride
            q_row = draft_probs_ptr + tl.cast(i, tl.int64) * draft_stride
            best = tl.full((), float("-inf"), tl.float32)
            best_id = tl.full((), NO_INDEX, tl.float32)
            for v in range(0, V, BLOCK):
                cols = v + offs
                ids = cols.to(tl.float32)
                p = tl.load(p_row + cols, mask=cols < V, other=0.0)
                if ONE_HOT:
                    residual = tl.where(ids == draft_id, 0.0, p)
                else:
                    residual = p - tl.load(q_row + cols, mask=cols < V, other=0.0)
                live = residual > 0.0  # padding lanes hold 0, NaN fails too
                score = tl.where(live, tl.log(tl.where(live, residual, 1.0)) + gumbel(key, cols), float("-inf"))
                chunk_best = fast_max(score, 0)
                chunk_id = fast_min(tl.where(live & (score == chunk_best), ids, NO_INDEX), 0)
                better = chunk_best > best  # strict: an earlier chunk keeps a tie; a chunk of -inf never wins
                best = tl.where(better, chunk_best, best)
                best_id = tl.where(better, chunk_id, best_id)
            fallback = tl.where((draft >= 0) & (draft < V), draft, 0)  # no positive residual
            tl.store(recovered_ptr + i, tl.where(best_id == NO_INDEX, fallback, best_id.to(tl.int32)))


def block_for(vocab: int) -> int:
    return min(BLOCK, triton.next_power_of_2(vocab))


def _grid(t: torch.Tensor, requests: int) -> tuple[int]:
    return (grid_size(t.device, requests),)


def rejection_greedy_sample(output_token_ids: torch.Tensor, cu_num_draft_tokens: torch.Tensor,
                            draft_token_ids: torch.Tensor, target_argmax: torch.Tensor, bonus_token_ids: torch.Tensor,
                            is_greedy: torch.Tensor | None) -> None:
    requests, width = output_token_ids.shape
    if requests:
        flags = None if is_greedy is None else is_greedy.view(torch.int8)  # bool read as int8: no i1 loads
        rejection_greedy_sample_kernel[_grid(output_token_ids, requests)](
            output_token_ids, cu_num_draft_tokens, draft_token_ids, target_argmax, bonus_token_ids, flags,
            requests, draft_token_ids.shape[0], width, ALL_GREEDY=is_greedy is None)


def sample_recovered_tokens(recovered_token_ids: torch.Tensor, cu_num_draft_tokens: torch.Tensor,
                            draft_token_ids: torch.Tensor, draft_probs: torch.Tensor | None,
                            target_probs: torch.Tensor, seeds: torch.Tensor, steps: torch.Tensor) -> None:
    tokens, vocab = target_probs.shape
    requests = cu_num_draft_tokens.shape[0]
    if tokens and requests:
        one_hot = draft_probs is None
        q = target_probs if one_hot else draft_probs  # one-hot: never read
        sample_recovered_tokens_kernel[_grid(target_probs, requests)](
            recovered_token_ids, cu_num_draft_tokens, draft_token_ids, q, target_probs, seeds, steps, requests, tokens,
            target_probs.stride(0), q.stride(0), V=vocab, BLOCK=block_for(vocab), ONE_HOT=one_hot)


def rejection_random_sample(output_token_ids: torch.Tensor, cu_num_draft_tokens: torch.Tensor,
                            draft_token_ids: torch.Tensor, draft_probs: torch.Tensor | None,
                            target_probs: torch.Tensor, bonus_token_ids: torch.Tensor,
                            recovered_token_ids: torch.Tensor, seeds: torch.Tensor, steps: torch.Tensor,
                            is_greedy: torch.Tensor) -> None:
    requests, width = output_token_ids.shape
    if requests:
        one_hot = draft_probs is None
        q = target_probs if one_hot else draft_probs
        rejection_random_sample_kernel[_grid(output_token_ids, requests)](
            output_token_ids, cu_num_draft_tokens, draft_token_ids, q, target_probs, bonus_token_ids,
            recovered_token_ids, seeds, steps, is_greedy.view(torch.int8), requests, draft_token_ids.shape[0], width,
            target_probs.shape[1], target_probs.stride(0), q.stride(0), ONE_HOT=one_hot)
