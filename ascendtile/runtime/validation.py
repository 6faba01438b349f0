"""Request validation: what LLM.generate refuses with a ValueError before any request starts,
so one malformed request never runs beside (or takes down) the others. The choices follow
vLLM, which rejects these at add_request:

- prompts[i]: not a text, a list of token ids or one of vLLM's prompt dicts (TextPrompt
  {"prompt": text}, TokensPrompt {"prompt_token_ids": ids}; their other keys, such as
  multi_modal_data, are refused by name); no tokens; a token id outside [0, vocab_size);
  prompt_len >= max_model_len (vLLM refuses prompt_len > max_model_len; at == the request could
  not generate a single token).
- sampling_params[i]: any field SamplingParams.validate refuses (max_tokens < 1, an empty stop
  string, ...; re-checked because the dataclass is mutable); stop strings without a tokenizer.

Not refused here: prompt + max_tokens past max_model_len is capped (finish_reason "length"), as
vLLM does; a request that needs more KV blocks than the whole cache is finished by the scheduler
with finish_reason "error" (it depends on the cache size, not on the request alone).
"""
from __future__ import annotations

import operator

from ascendtile.runtime.sampling_params import SamplingParams

# vLLM's TextPrompt and TokensPrompt: the one key each of them needs.
PROMPT_KEYS = ("prompt", "prompt_token_ids")


def resolve_prompt(i: int, prompt: object) -> str | list[int]:
    """prompts[i] as its text or token ids: a str, a sequence of ints (Python, NumPy or 0-dim
    tensor integers), or a vLLM prompt dict holding one of PROMPT_KEYS."""
    if isinstance(prompt, dict):
        keys = set(prompt)
        if len(keys) != 1 or not keys <= set(PROMPT_KEYS):
            raise ValueError(f"prompts[{i}]: a prompt dict takes exactly one of {list(PROMPT_KEYS)}; got keys "
                             f"{sorted(map(str, keys))}")
        key = keys.pop()
        prompt = prompt[key]
        if (key == "prompt") != isinstance(prompt, str):
            raise ValueError(f"prompts[{i}]: {key!r} takes {'a str' if key == 'prompt' else 'token ids'}, "
                             f"got {type(prompt).__name__}")
    if isinstance(prompt, str):
        return prompt
    try:
        return [operator.index(t) for t in prompt]
    except TypeError:
        holding = " holding non-integers" if hasattr(prompt, "__iter__") else ""
        raise ValueError(f"prompts[{i}]: expected a str, a list of int token ids or a prompt dict, got "
                         f"{type(prompt).__name__}{holding}") from None


def check_requests(token_ids: list[list[int]], params: list[SamplingParams], *, vocab_size: int,
                   max_model_len: int, has_tokenizer: bool) -> None:
    """Raise ValueError naming the first bad request's index and field; None if all are valid."""
    for i, (ids, p) in enumerate(zip(token_ids, params)):
        _check_prompt(i, ids, vocab_size, max_model_len)
        try:
            p.validate()
        except ValueError as e:
            raise ValueError(f"sampling_params[{i}]: {e}") from None
        if p.stop and not has_tokenizer:
            raise ValueError(f"sampling_params[{i}]: stop: stop strings need a tokenizer; this model has none")


def _check_prompt(i: int, ids: list[int], vocab_size: int, max_model_len: int) -> None:
    if not ids:
        raise ValueError(f"prompts[{i}]: the prompt is empty (no tokens)")
    bad = next((k for k, t in enumerate(ids) if not 0 <= t < vocab_size), None)
    if bad is not None:
        raise ValueError(f"prompts[{i}]: token id {ids[bad]} at position {bad} is outside the vocabulary "
                         f"[0, {vocab_size})")
    if len(ids) >= max_model_len:
        raise ValueError(f"prompts[{i}]: {len(ids)} tokens leave no room for a generated token within "
                         f"max_model_len {max_model_len}")
