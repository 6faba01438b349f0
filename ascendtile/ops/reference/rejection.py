"""References (also the CPU path) of the rejection family; the rules are ascendtile/ops/rejection.py's.

Every request's row is computed at once over a [B, width] grid of output slots: slot j of request
r reads draft position cu[r - 1] + j while j is below its draft count, and the accepted prefix's
length (a cumprod of the accept flags) places the emitted tokens. The acceptance uniform is the
kernel's bit for bit (kernels/_rng.py: unit_uniform of salted_key), so both paths accept the same
drafts. The recovered draw is an inverse-CDF draw (_sampling_draw.locate, sampling's, on the
weights max(p - q, 0) themselves): one uniform per position, hashed from (seed, step) with
RECOVER_SALT, located in the residual's prefix sums in vocabulary order.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ascendtile.ops.reference._sampling_draw import CHUNK, locate, row_keys, uniforms

PLACEHOLDER = -1
ACCEPT_SALT = 0x6A09E667  # kernels/rejection.py holds the same; sample_tokens' is 0x2545F491
RECOVER_SALT = 0x3C6EF372


def _spans(cu_num_draft_tokens: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(index, in_drafts): the flat draft position of each output slot (int64 [B, width], 0 where
    the slot holds no draft) and whether it holds one (bool [B, width])."""
    cu = cu_num_draft_tokens.long()
    start = torch.cat([cu.new_zeros(1), cu[:-1]])[:, None]
    count = cu[:, None] - start
    slots = torch.arange(width, device=cu.device)[None, :]
    index = start + slots
    in_drafts = slots < count
    return torch.where(in_drafts, index, 0), in_drafts


def _at(values: torch.Tensor, index: torch.Tensor, in_drafts: torch.Tensor, fill: int) -> torch.Tensor:
    """values[index] where in_drafts, fill elsewhere (values may be empty)."""
    if not values.numel():
        return torch.full(index.shape, fill, dtype=values.dtype, device=values.device)
    return torch.where(in_drafts, values[index], fill)


def _rows(accepted: torch.Tensor, in_drafts: torch.Tensor, drafts: torch.Tensor, rejected_token: torch.Tensor,
          bonus_token_ids: torch.Tensor) -> torch.Tensor:
    """The output rows: the accepted prefix's drafts, then rejected_token at the first rejection
    or the bonus after all drafts, then PLACEHOLDER."""
    kept = accepted.int().cumprod(-1).sum(-1, keepdim=True)  # the accepted prefix's length
    slots = torch.arange(accepted.shape[1], device=accepted.device)[None, :]
    emitted = torch.where(slots < kept, drafts, torch.where(in_drafts, rejected_token, bonus_token_ids[:, None]))
    return torch.where(slots <= kept, emitted, PLACEHOLDER).to(torch.int32)


def rejection_greedy_sample(output_token_ids: torch.Tensor, cu_num_draft_tokens: torch.Tensor,
                            draft_token_ids: torch.Tensor, target_argmax: torch.Tensor, bonus_token_ids: torch.Tensor,
                            is_greedy: torch.Tensor | None) -> None:
    index, in_drafts = _spans(cu_num_draft_tokens, output_token_ids.shape[1])
    drafts = _at(draft_token_ids, index, in_drafts, PLACEHOLDER)
    targets = _at(target_argmax, index, in_drafts, PLACEHOLDER)
    rows = _rows(in_drafts & (drafts == targets), in_drafts, drafts, targets, bonus_token_ids)
    if is_greedy is None:
        output_token_ids.copy_(rows)
    else:
        output_token_ids.copy_(torch.where(is_greedy[:, None], rows, output_token_ids))


def _requests(cu_num_draft_tokens: torch.Tensor, tokens: int) -> torch.Tensor:
    """The request (int64 [T]) each draft position belongs to."""
    positions = torch.arange(tokens, device=cu_num_draft_tokens.device, dtype=cu_num_draft_tokens.dtype)
    at = torch.searchsorted(cu_num_draft_tokens, positions, right=True)
    return at.clamp(max=max(cu_num_draft_tokens.shape[0] - 1, 0))


def accept_uniforms(seeds: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
    """The acceptance uniforms (fp32, exact: 23 bits + 0.5 over 2^23) of int64 seeds and steps, as
    the kernel's unit_uniform(salted_key(seed, step, ACCEPT_SALT))."""
    return ((row_keys(seeds, steps, ACCEPT_SALT) >> 9).to(torch.float32) + 0.5) * (1.0 / 8388608.0)


def sample_recovered_tokens(recovered_token_ids: torch.Tensor, cu_num_draft_tokens: torch.Tensor,
                            draft_token_ids: torch.Tensor, draft_probs: torch.Tensor | None,
                            target_probs: torch.Tensor, seeds: torch.Tensor, steps: torch.Tensor) -> None:
    tokens, vocab = target_probs.shape
    if not tokens:
        return
    drafts = draft_token_ids.long()
    valid = (drafts >= 0) & (drafts < vocab)
    if draft_probs is None:
        residual = target_probs.clone()
        rows = valid.nonzero()[:, 0]
        residual[rows, drafts[rows]] = 0.0
    else:
        residual = target_probs - draft_probs
    residual = torch.where(residual > 0, residual, 0.0)  # NaN reads as 0 too
    pad = -vocab % CHUNK
    chunks = (F.pad(residual, (0, pad)) if pad else residual).view(tokens, -1, CHUNK)
    token = locate(chunks, uniforms(seeds[_requests(cu_num_draft_tokens, tokens)], steps, RECOVER_SALT))
    empty = ~(residual > 0).any(-1)
    recovered_token_ids.copy_(torch.where(empty, torch.where(valid, drafts, 0), token))


def rejection_random_sample(output_token_ids: torch.Tensor, cu_num_draft_tokens: torch.Tensor,
                            draft_token_ids: torch.Tensor, draft_probs: torch.Tensor | None,
                            target_probs: torch.Tensor, bonus_token_ids: torch.Tensor,
                            recovered_token_ids: torch.Tensor, seeds: torch.Tensor, steps: torch.Tensor,
                            is_greedy: torch.Tensor) -> None:
    index, in_drafts = _spans(cu_num_draft_tokens, output_token_ids.shape[1])
    vocab = target_probs.shape[1]
    drafts = _at(draft_token_ids, index, in_drafts, PLACEHOLDER).long()
    valid = in_drafts & (drafts >= 0) & (drafts < vocab)
    column = torch.where(valid, drafts, 0)
    if target_probs.shape[0]:
        p = torch.where(valid, target_probs[index, column], 0.0)
        q = torch.ones_like(p) if draft_probs is None else torch.where(valid, draft_probs[index, column], 0.0)
        u = accept_uniforms(seeds[:, None].expand(index.shape), _at(steps, index, in_drafts, 0))
        accepted = valid & (q > 0) & (u * q < p)
    else:
        accepted = valid
    recovered = _at(recovered_token_ids, index, in_drafts, PLACEHOLDER)
    rows = _rows(accepted, in_drafts, drafts, recovered, bonus_token_ids)
    output_token_ids.copy_(torch.where(is_greedy[:, None], output_token_ids, rows))
