"""Sampling kernels: penalties, temperature + top-k / top-p / min-p filtering, seeded Gumbel-max
sampling with greedy rows, logprobs, and the token-count update. All are vector kernels,
persistent over rows; a row is read in BLOCK-wide contiguous chunks, so any vocabulary fits.

Filtering never sorts. With e = exp(y - max y) in (0, 1] (y = logits / temperature) each filter
is a threshold on e, found exactly by bisecting the int32 bit pattern of a non-negative fp32
threshold t (bit patterns of non-negative floats are ordered like the floats, and 2^30 patterns
cover [0, 2): 30 passes over the row):
  top-k: the smallest t with #{e > t} <= k - 1;
  top-p: the smallest t with sum{e > t, kept by top-k} <= top_p * sum{kept by top-k};
  min-p: t = min_p (e >= min_p * max e).
A token is kept when e >= every threshold. Tie rule: a token is judged by the tokens strictly
above it, so tokens equal to the boundary token are all kept (top-k may keep more than k).
The best token is always kept (e = 1 passes every threshold).

Non-finite logits and tiny temperatures follow ascendtile/ops/sampling.py's rules: a temperature
below SAMPLING_EPS is greedy; a NaN reads as -inf (_no_nan at every load that chooses); a row
holding +inf puts its mass on its +inf tokens in equal shares, so the filters of such a row keep
exactly those, the draw ranks them above every other token (Gumbel noise alone picks among them:
uniform; greedy: the lowest id) and logprobs read them as 0 and the rest as -inf.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ascendtile.kernels._reduce import fast_max, fast_min
from ascendtile.kernels._rng import gumbel, row_key
from ascendtile.platform import grid_size

BLOCK = 2048  # fp32 vocabulary chunk
THRESHOLD_BITS = 30  # bisection steps: 2^30 bit patterns span the thresholds [0, 2)
NO_INDEX = tl.constexpr(16777216.0)  # 2^24: above any vocabulary position, exact in fp32
FLT_MAX = tl.constexpr(3.4028234663852886e38)  # the largest finite fp32
SAMPLING_EPS = tl.constexpr(1e-5)  # ascendtile/ops/reference/sampling.py's: a temperature below it is greedy


@triton.jit
def _no_nan(y):
    """NaN read as -inf (a max or a compare on NaN would differ between devices)."""
    return tl.where(y == y, y, float("-inf"))


@triton.jit
def _scale_and_max(y_row, temperature, V: tl.constexpr, BLOCK: tl.constexpr):
    """y = logits / temperature in place; returns the max of y, NaN read as -inf."""
    offs = tl.arange(0, BLOCK)
    best = tl.full((), float("-inf"), tl.float32)
    for start in range(0, V, BLOCK):
        cols = start + offs
        y = tl.load(y_row + cols, mask=cols < V, other=float("-inf")) / temperature
        tl.store(y_row + cols, y, mask=cols < V)
        best = tl.maximum(best, fast_max(_no_nan(y), 0))
    return best


@triton.jit
def _mass_above(y_row, top, t, floor, COUNT: tl.constexpr, V: tl.constexpr, BLOCK: tl.constexpr):
    """Count (COUNT) or sum of e = exp(y - top) over tokens with e > t and e >= floor."""
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros((), tl.float32)
    for start in range(0, V, BLOCK):
        cols = start + offs
        e = tl.exp(tl.load(y_row + cols, mask=cols < V, other=float("-inf")) - top)
        chosen = (e > t) & (e >= floor)  # padding lanes have e = 0: never above t >= 0
        acc += tl.sum(tl.where(chosen, 1.0 if COUNT else e, 0.0), 0)
    return acc


@triton.jit
def _bisect(y_row, top, floor, limit, COUNT: tl.constexpr, V: tl.constexpr, BLOCK: tl.constexpr,
            STEPS: tl.constexpr):
    """The smallest threshold t >= 0 with _mass_above(t) <= limit (exact: bisection on bits)."""
    lo = tl.full((), -1, tl.int32)  # below 0.0: never tested
    hi = tl.full((), (1 << STEPS) - 1, tl.int32)  # 1.99999988: nothing is above it
    for _ in range(STEPS):
        mid = lo + (hi - lo) // 2
        fits = _mass_above(y_row, top, mid.to(tl.float32, bitcast=True), floor, COUNT, V, BLOCK) <= limit
        hi = tl.where(fits, mid, hi)
        lo = tl.where(fits, lo, mid)
    return hi.to(tl.float32, bitcast=True)


@triton.jit
def _drop_below(y_row, top, floor, V: tl.constexpr, BLOCK: tl.constexpr):
    """-inf wherever exp(y - top) < floor, and on NaN (exp(NaN) fails the compare)."""
    offs = tl.arange(0, BLOCK)
    for start in range(0, V, BLOCK):
        cols = start + offs
        y = tl.load(y_row + cols, mask=cols < V, other=float("-inf"))
        tl.store(y_row + cols, tl.where(tl.exp(y - top) >= floor, y, float("-inf")), mask=cols < V)


@triton.jit(do_not_specialize=["n_rows", "stride"])
def process_logits_kernel(
    logits_ptr, temperature_ptr, top_k_ptr, top_p_ptr, min_p_ptr, n_rows, stride,
    V: tl.constexpr, BLOCK: tl.constexpr, STEPS: tl.constexpr,
):
    for row in range(tl.program_id(0), n_rows, tl.num_programs(0)):
        temperature = tl.load(temperature_ptr + row)
        if temperature >= SAMPLING_EPS:  # below: greedy, the row stays raw
            y_row = logits_ptr + tl.cast(row, tl.int64) * stride
            top = _scale_and_max(y_row, temperature, V, BLOCK)
            top_k = tl.load(top_k_ptr + row)
            top_p = tl.load(top_p_ptr + row)
            min_p = tl.load(min_p_ptr + row)
            if ((top_k > 0) & (top_k < V)) | (top_p < 1.0) | (min_p > 0.0):  # filtered: NaN -> -inf too
                floor = tl.zeros((), tl.float32)
                if (top > float("-inf")) & (top < float("inf")):  # a row of -inf only drops its NaN
                    if (top_k > 0) & (top_k < V):
                        floor = _bisect(y_row, top, floor, (top_k - 1).to(tl.float32), True, V, BLOCK, STEPS)
                    if top_p < 1.0:
                        kept = _mass_above(y_row, top, -1.0, floor, False, V, BLOCK)
                        floor = _bisect(y_row, top, floor, top_p * kept, False, V, BLOCK, STEPS)
                    floor = tl.maximum(floor, min_p)
                # A row holding +inf keeps exactly those tokens (all its mass; every filter keeps a
                # tied best group): against the largest finite float and floor +inf, only
                # exp(inf - FLT_MAX) = inf passes. The same pass, so no second buffer set in UB.
                infinite = top == float("inf")
                _drop_below(y_row, tl.where(infinite, FLT_MAX, top), tl.where(infinite, float("inf"), floor), V, BLOCK)


@triton.jit(do_not_specialize=["n_rows", "stride"])
def sample_tokens_kernel(
    token_ids_ptr, logits_ptr, temperature_ptr, seeds_ptr, steps_ptr, n_rows, stride,
    V: tl.constexpr, BLOCK: tl.constexpr,
):
    """argmax(y + Gumbel noise) per row, or argmax(y) where temperature < SAMPLING_EPS; the lowest
    token id wins ties. NaN reads as -inf; +inf tokens rank above all others (level 1), scored by
    their noise alone; a row of -inf gives token 0."""
    offs = tl.arange(0, BLOCK)
    for row in range(tl.program_id(0), n_rows, tl.num_programs(0)):
        y_row = logits_ptr + tl.cast(row, tl.int64) * stride
        noisy = tl.where(tl.load(temperature_ptr + row) >= SAMPLING_EPS, 1.0, 0.0)
        key = row_key(tl.load(seeds_ptr + row), tl.load(steps_ptr + row))
        best_level = tl.zeros((), tl.float32)
        best = tl.full((), float("-inf"), tl.float32)
        best_id = tl.full((), NO_INDEX, tl.float32)
        for start in range(0, V, BLOCK):
            cols = start + offs
            y = _no_nan(tl.load(y_row + cols, mask=cols < V, other=float("-inf")))
            noise = noisy * gumbel(key, cols)
            level = tl.where(y == float("inf"), 1.0, 0.0)
            score = tl.where(level > 0.0, noise, y + noise)
            chunk_level = fast_max(level, 0)
            chunk_best = fast_max(tl.where(level == chunk_level, score, float("-inf")), 0)
            at_best = (level == chunk_level) & (score == chunk_best) & (cols < V)
            chunk_id = fast_min(tl.where(at_best, cols.to(tl.float32), NO_INDEX), 0)
            better = ((chunk_level > best_level) | ((chunk_level == best_level) & (chunk_best > best))
                      | (best_id == NO_INDEX))
            best_level = tl.where(better, chunk_level, best_level)
            best = tl.where(better, chunk_best, best)
            best_id = tl.where(better, chunk_id, best_id)
        tl.store(token_ids_ptr + row, best_id.to(tl.int32))


@triton.jit(do_not_specialize=["n_rows", "n_slots", "stride", "counts_stride", "prompt_stride"])
def apply_penalties_kernel(
    logits_ptr, counts_ptr, prompt_ptr, count_rows_ptr, repetition_ptr, frequency_ptr, presence_ptr,
    n_rows, n_slots, stride, counts_stride, prompt_stride, V: tl.constexpr, BLOCK: tl.constexpr,
):
    offs = tl.arange(0, BLOCK)
    for row in range(tl.program_id(0), n_rows, tl.num_programs(0)):
        count_row = tl.load(count_rows_ptr + row)
        # -1: a padding row, no penalties; a count row outside the table is never read either
        if (count_row >= 0) & (count_row < n_slots):
            repetition = tl.load(repetition_ptr + row)
            frequency = tl.load(frequency_ptr + row)
            presence = tl.load(presence_ptr + row)
            x_row = logits_ptr + tl.cast(row, tl.int64) * stride
            c_row = counts_ptr + tl.cast(count_row, tl.int64) * counts_stride
            p_row = prompt_ptr + tl.cast(count_row, tl.int64) * prompt_stride
            for start in range(0, V, BLOCK):
                cols = start + offs
                x = tl.load(x_row + cols, mask=cols < V, other=0.0)
                count = tl.load(c_row + cols, mask=cols < V, other=0).to(tl.float32)
                in_prompt = tl.load(p_row + cols, mask=cols < V, other=0).to(tl.float32)
                x = tl.where(count + in_prompt > 0.0, tl.where(x > 0.0, x / repetition, x * repetition), x)
                x = x - frequency * count - presence * tl.where(count > 0.0, 1.0, 0.0)
                tl.store(x_row + cols, x, mask=cols < V)


@triton.jit(do_not_specialize=["n_rows", "n_slots", "vocab", "stride"])
def update_token_counts_kernel(counts_ptr, count_rows_ptr, token_ids_ptr, n_rows, n_slots, vocab, stride):
    # One scalar read-modify-write per row: count rows are distinct, so programs never collide. A
    # count row or token outside the table is skipped (scalar compares), never written.
    for row in range(tl.program_id(0), n_rows, tl.num_programs(0)):
        count_row = tl.load(count_rows_ptr + row)
        token = tl.load(token_ids_ptr + row)
        if (count_row >= 0) & (count_row < n_slots) & (token >= 0) & (token < vocab):
            slot = counts_ptr + tl.cast(count_row, tl.int64) * stride + token
            tl.store(slot, tl.load(slot) + 1)


@triton.jit
def _logprob_logits(y, infinite_row):
    """The logits gather_logprobs reads: NaN as -inf; in a row holding +inf (infinite_row), 0 on
    those tokens and -inf on the others (their equal shares of the mass)."""
    y = _no_nan(y)
    return tl.where(infinite_row, tl.where(y == float("inf"), 0.0, float("-inf")), y)


@triton.jit
def _next_best(y_row, prev, prev_id, infinite_row, V: tl.constexpr, BLOCK: tl.constexpr):
    """The largest (value, lowest id) after (prev, prev_id) in (value desc, id asc) order."""
    offs = tl.arange(0, BLOCK)
    best = tl.full((), float("-inf"), tl.float32)
    best_id = tl.full((), NO_INDEX, tl.float32)
    for start in range(0, V, BLOCK):
        cols = start + offs
        ids = cols.to(tl.float32)
        y = _logprob_logits(tl.load(y_row + cols, mask=cols < V, other=float("-inf")), infinite_row)
        after = ((y < prev) | ((y == prev) & (ids > prev_id))) & (cols < V)
        chunk_best = fast_max(tl.where(after, y, float("-inf")), 0)
        chunk_id = fast_min(tl.where(after & (y == chunk_best), ids, NO_INDEX), 0)
        better = (chunk_best > best) | ((chunk_best == best) & (chunk_id < best_id))
        best = tl.where(better, chunk_best, best)
        best_id = tl.where(better, chunk_id, best_id)
    return best, best_id


@triton.jit(do_not_specialize=["n_out", "n_rows", "n_top", "out_stride", "ids_stride", "stride"])
def gather_logprobs_kernel(
    logprobs_ptr, ids_ptr, logits_ptr, rows_ptr, token_ids_ptr, n_out, n_rows, n_top, out_stride, ids_stride,
    stride, V: tl.constexpr, BLOCK: tl.constexpr,
):
    offs = tl.arange(0, BLOCK)
    for i in range(tl.program_id(0), n_out, tl.num_programs(0)):
        row = tl.load(rows_ptr + i)
        # A row outside logits, or its token outside the vocabulary, leaves output row i as it was.
        if (row >= 0) & (row < n_rows):
            token = tl.load(token_ids_ptr + row)
            if (token >= 0) & (token < V):
                _gather_row(logprobs_ptr, ids_ptr, logits_ptr, row, token, i, n_top, out_stride, ids_stride, stride,
                            V, BLOCK)


@triton.jit
def _gather_row(logprobs_ptr, ids_ptr, logits_ptr, row, token, i, n_top, out_stride, ids_stride, stride,
                V: tl.constexpr, BLOCK: tl.constexpr):
    """Output row i: logits row `row`'s log-softmax at `token`, then its n_top best; a row without
    a finite or +inf logit has every logprob -inf."""
    offs = tl.arange(0, BLOCK)
    y_row = logits_ptr + tl.cast(row, tl.int64) * stride
    top = tl.full((), float("-inf"), tl.float32)
    for start in range(0, V, BLOCK):
        cols = start + offs
        top = tl.maximum(top, fast_max(_no_nan(tl.load(y_row + cols, mask=cols < V, other=float("-inf"))), 0))
    infinite_row = top == float("inf")
    top = tl.where(infinite_row, 0.0, top)
    total = tl.zeros((), tl.float32)
    for start in range(0, V, BLOCK):
        cols = start + offs
        y = _logprob_logits(tl.load(y_row + cols, mask=cols < V, other=float("-inf")), infinite_row)
        total += tl.sum(tl.exp(y - top), 0)
    lse = tl.where(top > float("-inf"), top + tl.log(total), 0.0)  # a row of -inf: -inf - 0
    out_row = logprobs_ptr + tl.cast(i, tl.int64) * out_stride
    ids_row = ids_ptr + tl.cast(i, tl.int64) * ids_stride
    tl.store(out_row, _logprob_logits(tl.load(y_row + token), infinite_row) - lse)
    tl.store(ids_row, token)
    prev = tl.full((), float("inf"), tl.float32)
    prev_id = tl.full((), -1.0, tl.float32)
    for j in range(n_top):
        prev, prev_id = _next_best(y_row, prev, prev_id, infinite_row, V, BLOCK)
        tl.store(out_row + 1 + j, prev - lse)
        tl.store(ids_row + 1 + j, prev_id.to(tl.int32))


def block_for(vocab: int) -> int:
    return min(BLOCK, triton.next_power_of_2(vocab))


def _grid(t: torch.Tensor, rows: int) -> tuple[int]:
    return (grid_size(t.device, rows),)


def process_logits(logits: torch.Tensor, temperatures: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                   min_p: torch.Tensor) -> None:
    rows, vocab = logits.shape
    if rows:
        process_logits_kernel[_grid(logits, rows)](
            logits, temperatures, top_k, top_p, min_p, rows, logits.stride(0),
            V=vocab, BLOCK=block_for(vocab), STEPS=THRESHOLD_BITS)


def sample_tokens(token_ids: torch.Tensor, logits: torch.Tensor, temperatures: torch.Tensor, seeds: torch.Tensor,
                  steps: torch.Tensor) -> None:
    rows, vocab = logits.shape
    if rows:
        sample_tokens_kernel[_grid(logits, rows)](
            token_ids, logits, temperatures, seeds, steps, rows, logits.stride(0), V=vocab, BLOCK=block_for(vocab))


def apply_penalties(logits: torch.Tensor, output_counts: torch.Tensor, prompt_mask: torch.Tensor,
                    count_rows: torch.Tensor, repetition_penalties: torch.Tensor, frequency_penalties: torch.Tensor,
                    presence_penalties: torch.Tensor) -> None:
    rows, vocab = logits.shape
    if rows:
        apply_penalties_kernel[_grid(logits, rows)](
            logits, output_counts, prompt_mask, count_rows, repetition_penalties, frequency_penalties,
            presence_penalties, rows, output_counts.shape[0], logits.stride(0), output_counts.stride(0),
            prompt_mask.stride(0),
            V=vocab, BLOCK=block_for(vocab))


def update_token_counts(output_counts: torch.Tensor, count_rows: torch.Tensor, token_ids: torch.Tensor) -> None:
    rows = count_rows.shape[0]
    if rows:
        update_token_counts_kernel[_grid(output_counts, rows)](
            output_counts, count_rows, token_ids, rows, output_counts.shape[0], output_counts.shape[1],
            output_counts.stride(0))


def gather_logprobs(logprobs: torch.Tensor, logprob_ids: torch.Tensor, logits: torch.Tensor, rows: torch.Tensor,
                    token_ids: torch.Tensor) -> None:
    n_out, vocab = rows.shape[0], logits.shape[1]
    if n_out:
        gather_logprobs_kernel[_grid(logits, n_out)](
            logprobs, logprob_ids, logits, rows, token_ids, n_out, logits.shape[0], logprobs.shape[1] - 1,
            logprobs.stride(0), logprob_ids.stride(0), logits.stride(0), V=vocab, BLOCK=block_for(vocab))
