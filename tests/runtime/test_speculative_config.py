"""SpeculativeConfig: vLLM's defaults for the n-gram lookup lengths, from_user, and each bad value
refused with an error naming its field."""
from __future__ import annotations

import pickle

import pytest

from ascendtile.runtime.speculative_config import SpeculativeConfig


def lookup(**fields) -> tuple[int, int]:
    c = SpeculativeConfig(method="ngram", num_speculative_tokens=3, **fields)
    return c.prompt_lookup_min, c.prompt_lookup_max


def test_prompt_lookup_defaults_are_vllms():
    assert lookup() == (5, 5)
    assert lookup(prompt_lookup_max=4) == (4, 4)
    assert lookup(prompt_lookup_min=2) == (2, 2)
    assert lookup(prompt_lookup_min=1, prompt_lookup_max=1) == (1, 1)
    assert lookup(prompt_lookup_min=2, prompt_lookup_max=7) == (2, 7)


def test_old_ngram_spelling_and_pickle():
    c = SpeculativeConfig(method="[ngram]", num_speculative_tokens=1)
    assert c.method == "ngram" and c.num_speculative_tokens == 1
    assert pickle.loads(pickle.dumps(c)) == c


def test_from_user():
    assert SpeculativeConfig.from_user(None) is None
    c = SpeculativeConfig(method="ngram", num_speculative_tokens=2)
    assert SpeculativeConfig.from_user(c) is c
    d = SpeculativeConfig.from_user({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3})
    assert (d.method, d.num_speculative_tokens, d.prompt_lookup_min, d.prompt_lookup_max) == ("ngram", 4, 3, 3)
    with pytest.raises(ValueError, match=r"^speculative_config: unknown field\(s\) \['model'\]"):
        SpeculativeConfig.from_user({"method": "ngram", "num_speculative_tokens": 4, "model": "ngram"})
    with pytest.raises(ValueError, match=r"^speculative_config.num_speculative_tokens: required"):
        SpeculativeConfig.from_user({"method": "ngram"})
    with pytest.raises(ValueError, match=r"^speculative_config.method: required"):
        SpeculativeConfig.from_user({"num_speculative_tokens": 2})
    with pytest.raises(TypeError, match="^speculative_config: expected a SpeculativeConfig, dict or None, got int"):
        SpeculativeConfig.from_user(3)


@pytest.mark.parametrize("fields,error,match", [
    ({"method": "eagle"}, ValueError, r"^speculative_config.method: 'eagle' is not supported; supported: \['ngram'\]"),
    ({"method": None}, ValueError, r"^speculative_config.method: None is not supported"),
    ({"num_speculative_tokens": 0}, ValueError, r"^speculative_config.num_speculative_tokens: must be >= 1, got 0"),
    ({"num_speculative_tokens": 2.0}, TypeError, r"^speculative_config.num_speculative_tokens: expected an int"),
    ({"num_speculative_tokens": True}, TypeError, r"^speculative_config.num_speculative_tokens: expected an int"),
    ({"prompt_lookup_min": 0}, ValueError, r"^speculative_config.prompt_lookup_min: must be >= 1, got 0"),
    ({"prompt_lookup_max": 0}, ValueError, r"^speculative_config.prompt_lookup_max: must be >= 1, got 0"),
    ({"prompt_lookup_max": -2, "prompt_lookup_min": 1}, ValueError,
     r"^speculative_config.prompt_lookup_max: must be >= 1, got -2"),
    ({"prompt_lookup_min": 1, "prompt_lookup_max": 0}, ValueError,
     r"^speculative_config.prompt_lookup_max: must be >= 1, got 0"),
    ({"prompt_lookup_min": "2"}, TypeError, r"^speculative_config.prompt_lookup_min: expected an int"),
    ({"prompt_lookup_min": 4, "prompt_lookup_max": 3}, ValueError,
     r"^speculative_config.prompt_lookup_max: must be >= prompt_lookup_min \(4\), got 3"),
])
def test_bad_values_name_their_field(fields, error, match):
    with pytest.raises(error, match=match):
        SpeculativeConfig(**{"method": "ngram", "num_speculative_tokens": 3, **fields})


def test_fields_are_keyword_only():
    with pytest.raises(TypeError):
        SpeculativeConfig("ngram", 3)
