"""Ops: the sampling family — penalties, logit processing (temperature, top-k, top-p, min-p),
seeded sampling, logprobs and the token-count update. Rules and the tie rule:
ascendtile/kernels/sampling.py.

Tiny temperatures and non-finite logits, the same on both paths: a temperature below
SAMPLING_EPS (1e-5, vLLM's _SAMPLING_EPS) is greedy, so a tiny temperature never divides a row
into infs (at 1e-5 only logits beyond ~3e33 would overflow). A NaN logit counts as -inf: never kept by a filter, never sampled, never
the argmax, logprob -inf. A row holding +inf puts all of its mass on its +inf tokens, in equal
shares (the limit of the softmax as those logits grow together): a draw picks uniformly among
them, greedy takes the first (the tie rule), a filter keeps exactly them, their logprob is
-log(count) and every other token's -inf. A row without a finite or +inf logit (all -inf or
NaN) samples token 0 (as argmax of a row of -inf does) and has every logprob -inf. Penalties
act on each logit alone, so they keep NaN and infs as they are.

Value ranges (temperature >= 0, top_k >= 0, top_p in (0, 1], min_p in [0, 1]) and index ranges
(count_rows, token_ids, rows) are checked on CPU tensors, where reading them is free. On NPU/CUDA
that check would be a host sync inside a graph-captured step, so there it runs only with
ASCENDTILE_CHECK_INDICES=1; the caller (the runtime's SamplingParams) owns the value ranges, and
the kernels skip an index outside its table (a count row or token: no penalty, no count; a
logprob row or its token: that output row is left as it was).
"""
from __future__ import annotations

import torch

from ascendtile.ops._indices import checkable
from ascendtile.ops._registry import register_op
from ascendtile.ops._validate import (FP32, INT8, INT32, INT64, check_same_device,
                                       check_shape, check_tensor, check_vector)
from ascendtile.ops.reference.sampling import SAMPLING_EPS  # noqa: F401  (public: SamplingParams' greedy bound)


def _check_logits(logits: torch.Tensor) -> tuple[int, int]:
    check_tensor("logits", logits, dtypes=FP32, ndim=2)
    if logits.shape[1] == 0:
        raise ValueError("logits: the vocabulary dim is empty")
    return logits.shape[0], logits.shape[1]


def _check_per_row(rows: int, dtypes: tuple, **tensors: torch.Tensor) -> None:
    for name, t in tensors.items():
        check_vector(name, t, rows, dtypes, "one per row")


def _check_range(name: str, t: torch.Tensor, ok: torch.Tensor | None, what: str) -> None:
    if ok is not None and not bool(ok.all()):
        raise ValueError(f"{name}: every value must be {what}")


def _validate_process(logits, temperatures, top_k, top_p, min_p) -> None:
    rows, _ = _check_logits(logits)
    _check_per_row(rows, FP32, temperatures=temperatures, top_p=top_p, min_p=min_p)
    _check_per_row(rows, INT32, top_k=top_k)
    check_same_device(logits=logits, temperatures=temperatures, top_k=top_k, top_p=top_p, min_p=min_p)
    if checkable(logits):
        _check_range("temperatures", temperatures, temperatures >= 0, ">= 0 (0 = greedy)")
        _check_range("top_k", top_k, top_k >= 0, ">= 0 (0 = off)")
        _check_range("top_p", top_p, (top_p > 0) & (top_p <= 1), "in (0, 1] (1 = off)")
        _check_range("min_p", min_p, (min_p >= 0) & (min_p <= 1), "in [0, 1] (0 = off)")


def _validate_sample(token_ids, logits, temperatures, seeds, steps) -> None:
    rows, _ = _check_logits(logits)
    _check_per_row(rows, INT32, token_ids=token_ids)
    _check_per_row(rows, FP32, temperatures=temperatures)
    _check_per_row(rows, INT64, seeds=seeds, steps=steps)
    check_same_device(logits=logits, token_ids=token_ids, temperatures=temperatures, seeds=seeds, steps=steps)
    if checkable(logits):
        _check_range("temperatures", temperatures, temperatures >= 0, ">= 0 (0 = greedy)")


def _check_counts(output_counts: torch.Tensor, vocab: int | None) -> int:
    check_tensor("output_counts", output_counts, dtypes=INT32, ndim=2, contiguous=True)
    if vocab is not None and output_counts.shape[1] != vocab:
        raise ValueError(f"output_counts: expected {vocab} columns (the vocabulary), got {output_counts.shape[1]}")
    return output_counts.shape[0]


def _check_count_rows(count_rows: torch.Tensor, rows: int, slots: int) -> None:
    _check_per_row(rows, INT32, count_rows=count_rows)
    if checkable(count_rows):
        _check_range("count_rows", count_rows, (count_rows >= -1) & (count_rows < slots), f"in [-1, {slots})")
        used = count_rows[count_rows >= 0]
        if used.unique().numel() != used.numel():
            raise ValueError("count_rows: rows other than -1 must be distinct")


def _validate_penalties(logits, output_counts, prompt_mask, count_rows, repetition_penalties,
                        frequency_penalties, presence_penalties) -> None:
    rows, vocab = _check_logits(logits)
    slots = _check_counts(output_counts, vocab)
    check_tensor("prompt_mask", prompt_mask, dtypes=INT8, ndim=2, contiguous=True)
    check_shape("prompt_mask", prompt_mask, output_counts.shape, "same as output_counts")
    _check_count_rows(count_rows, rows, slots)
    _check_per_row(rows, FP32, repetition_penalties=repetition_penalties, frequency_penalties=frequency_penalties,
                   presence_penalties=presence_penalties)
    check_same_device(logits=logits, output_counts=output_counts, prompt_mask=prompt_mask, count_rows=count_rows,
                      repetition_penalties=repetition_penalties, frequency_penalties=frequency_penalties,
                      presence_penalties=presence_penalties)
    if checkable(logits):
        _check_range("repetition_penalties", repetition_penalties, repetition_penalties > 0, "> 0 (1 = off)")


def _validate_update(output_counts, count_rows, token_ids) -> None:
    slots = _check_counts(output_counts, None)
    rows = count_rows.shape[0] if isinstance(count_rows, torch.Tensor) else 0
    _check_count_rows(count_rows, rows, slots)
    _check_per_row(rows, INT32, token_ids=token_ids)
    check_same_device(output_counts=output_counts, count_rows=count_rows, token_ids=token_ids)
    if checkable(token_ids):
        vocab = output_counts.shape[1]
        _check_range("token_ids", token_ids, (token_ids >= 0) & (token_ids < vocab), f"in [0, {vocab})")


def _validate_logprobs(logprobs, logprob_ids, logits, rows, token_ids) -> None:
    n_rows, vocab = _check_logits(logits)
    check_tensor("rows", rows, dtypes=INT32, ndim=1, contiguous=True)
    check_tensor("logprobs", logprobs, dtypes=FP32, ndim=2)
    if logprobs.shape[0] != rows.shape[0] or not 1 <= logprobs.shape[1] <= vocab + 1:
        raise ValueError(f"logprobs: expected [{rows.shape[0]}, 1 + n] with n <= {vocab}, got {tuple(logprobs.shape)}")
    check_tensor("logprob_ids", logprob_ids, dtypes=INT32, ndim=2)
    check_shape("logprob_ids", logprob_ids, logprobs.shape, "same as logprobs")
    _check_per_row(n_rows, INT32, token_ids=token_ids)
    check_same_device(logits=logits, logprobs=logprobs, logprob_ids=logprob_ids, rows=rows, token_ids=token_ids)
    if checkable(rows):
        _check_range("rows", rows, (rows >= 0) & (rows < n_rows), f"in [0, {n_rows})")
    if checkable(token_ids):
        _check_range("token_ids", token_ids, (token_ids >= 0) & (token_ids < vocab), f"in [0, {vocab})")


PROCESS_LOGITS_SCHEMA = "(Tensor! logits, Tensor temperatures, Tensor top_k, Tensor top_p, Tensor min_p) -> ()"
process_logits_op = register_op("process_logits", PROCESS_LOGITS_SCHEMA, validate=_validate_process)

SAMPLE_TOKENS_SCHEMA = "(Tensor! token_ids, Tensor logits, Tensor temperatures, Tensor seeds, Tensor steps) -> ()"
sample_tokens_op = register_op("sample_tokens", SAMPLE_TOKENS_SCHEMA, validate=_validate_sample)

APPLY_PENALTIES_SCHEMA = ("(Tensor! logits, Tensor output_counts, Tensor prompt_mask, Tensor count_rows, "
                          "Tensor repetition_penalties, Tensor frequency_penalties, Tensor presence_penalties) -> ()")
apply_penalties_op = register_op("apply_penalties", APPLY_PENALTIES_SCHEMA, validate=_validate_penalties)

UPDATE_TOKEN_COUNTS_SCHEMA = "(Tensor! output_counts, Tensor count_rows, Tensor token_ids) -> ()"
update_token_counts_op = register_op("update_token_counts", UPDATE_TOKEN_COUNTS_SCHEMA, validate=_validate_update)

GATHER_LOGPROBS_SCHEMA = "(Tensor! logprobs, Tensor! logprob_ids, Tensor logits, Tensor rows, Tensor token_ids) -> ()"
gather_logprobs_op = register_op("gather_logprobs", GATHER_LOGPROBS_SCHEMA, validate=_validate_logprobs)


def process_logits(logits: torch.Tensor, temperatures: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                   min_p: torch.Tensor) -> torch.Tensor:
    """In place on logits [rows, vocab] fp32: rows with temperature >= SAMPLING_EPS become
    logits / temperature with the tokens outside top-k / top-p / min-p set to -inf; rows below it
    (greedy) are left as they are. A filtered row also turns NaN into -inf and, if it holds +inf,
    keeps only its +inf tokens; a row only scaled keeps its NaN and infs (sample_tokens reads
    them by the module's rules). temperatures, top_p, min_p: fp32 [rows]; top_k: int32 [rows].
    Off: top_k 0, top_p 1, min_p 0. Returns logits."""
    process_logits_op(logits, temperatures, top_k, top_p, min_p)
    return logits


def sample_tokens(logits: torch.Tensor, temperatures: torch.Tensor, seeds: torch.Tensor,
                  steps: torch.Tensor) -> torch.Tensor:
    """One token per row of processed logits [rows, vocab] fp32 -> int32 [rows], drawn from
    softmax(logits) with randomness hashed from (seeds[row], steps[row]) (int64 [rows]) only, so a
    row's draw does not depend on the rest of the batch; argmax where temperatures[row] (fp32) is
    below SAMPLING_EPS (ties: lowest id). NaN, +inf and rows of -inf: the module's rules. The
    Triton kernel draws by Gumbel-max, the reference (CPU) by inverse CDF: each is reproducible,
    but the two may pick different tokens for one seed."""
    token_ids = torch.empty(logits.shape[0], dtype=torch.int32, device=logits.device)
    sample_tokens_op(token_ids, logits, temperatures, seeds, steps)
    return token_ids


def apply_penalties(logits: torch.Tensor, output_counts: torch.Tensor, prompt_mask: torch.Tensor,
                    count_rows: torch.Tensor, repetition_penalties: torch.Tensor, frequency_penalties: torch.Tensor,
                    presence_penalties: torch.Tensor) -> torch.Tensor:
    """vLLM's penalties, in place on logits [rows, vocab] fp32. Row r reads the counts row
    count_rows[r] (int32 [rows]; -1 = no penalties) of output_counts (int32 [slots, vocab],
    occurrences in the output) and prompt_mask (int8 [slots, vocab], 1 = in the prompt).
    Tokens in prompt or output: positive logits / repetition, others * repetition; then
    logits -= frequency * count + presence * (count > 0). Penalties: fp32 [rows]. Returns logits."""
    apply_penalties_op(logits, output_counts, prompt_mask, count_rows, repetition_penalties, frequency_penalties,
                       presence_penalties)
    return logits


def update_token_counts(output_counts: torch.Tensor, count_rows: torch.Tensor, token_ids: torch.Tensor) -> None:
    """output_counts[count_rows[r], token_ids[r]] += 1 for rows with count_rows[r] >= 0 (int32
    [rows], distinct); output_counts int32 [slots, vocab]; token_ids int32 [rows]."""
    update_token_counts_op(output_counts, count_rows, token_ids)


def gather_logprobs(logits: torch.Tensor, rows: torch.Tensor, token_ids: torch.Tensor,
                    num_top: int) -> tuple[torch.Tensor, torch.Tensor]:
    """For the logits rows listed in rows (int32 [n]): log_softmax at token_ids[row] (int32
    [rows]) and the num_top largest, ordered by value then lowest id (NaN, +inf and rows of -inf:
    the module's rules). Returns (logprobs fp32 [n, 1 + num_top], ids int32 [n, 1 + num_top]);
    column 0 is the given token."""
    logprobs = torch.empty(rows.shape[0], 1 + num_top, dtype=torch.float32, device=logits.device)
    ids = torch.empty(logprobs.shape, dtype=torch.int32, device=logits.device)
    gather_logprobs_op(logprobs, ids, logits, rows, token_ids)
    return logprobs, ids
