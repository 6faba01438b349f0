"""NgramProposer against a brute-force reference (nested loops over n and every earlier start),
on random histories over small alphabets (many matches, many ties between occurrences)."""
from __future__ import annotations

import random

import numpy as np
import pytest

from ascendtile.runtime.ngram_proposer import NgramProposer
from ascendtile.runtime.speculative_config import SpeculativeConfig


def reference(history: list[int], k: int, min_n: int, max_n: int) -> list[int]:
    """The longest n in [min_n, max_n] whose last-n tokens occur earlier (starting before the
    suffix itself), then the earliest such start; up to k tokens after that occurrence."""
    total = len(history)
    for n in range(max_n, min_n - 1, -1):
        suffix = history[total - n:] if n <= total else None
        if suffix is None:
            continue
        for start in range(total - n):  # start total - n is the suffix itself
            if all(history[start + j] == suffix[j] for j in range(n)):
                return history[start + n:start + n + k]
    return []


def proposer(k: int, min_n: int, max_n: int) -> NgramProposer:
    return NgramProposer(SpeculativeConfig(method="ngram", num_speculative_tokens=k, prompt_lookup_min=min_n,
                                           prompt_lookup_max=max_n))


@pytest.mark.parametrize("alphabet", [1, 2, 3, 5])
@pytest.mark.parametrize("k,min_n,max_n", [(1, 1, 1), (3, 1, 4), (4, 2, 3), (7, 3, 3), (2, 2, 6)])
def test_matches_brute_force_on_random_histories(alphabet, k, min_n, max_n):
    rng = random.Random(alphabet * 1000 + k * 100 + min_n * 10 + max_n)
    p = proposer(k, min_n, max_n)
    for _ in range(60):
        history = [rng.randrange(alphabet) for _ in range(rng.randrange(0, 41))]
        expected = reference(history, k, min_n, max_n)
        assert p.propose(history) == expected, history
        assert p.propose(np.array(history, dtype=np.int32)) == expected, history


def test_large_token_ids_and_long_history():
    rng = random.Random(7)
    history = [rng.randrange(50_000, 50_004) for _ in range(997)]
    p = proposer(5, 2, 5)
    got = p.propose(history)
    assert got == reference(history, 5, 2, 5) and len(got) == 5
    assert all(isinstance(t, int) for t in got)


def test_cases_by_hand():
    p = proposer(3, 2, 3)
    # longest n first: "7 8 9" occurs once, "8 9" earlier too; the 3-gram wins
    assert p.propose([8, 9, 1, 7, 8, 9, 4, 4, 7, 8, 9]) == [4, 4, 7]
    # k larger than what follows the match: drafts end with the history
    assert p.propose([5, 6, 2, 5, 6]) == [2, 5, 6]
    assert proposer(8, 2, 3).propose([5, 6, 2, 5, 6]) == [2, 5, 6]
    # the earliest occurrence, overlapping the suffix; the last one would give only [1]
    assert proposer(8, 2, 2).propose([1, 1, 1, 1]) == [1, 1]
    # history no longer than n: nothing can occur before the suffix
    assert p.propose([4, 4]) == [] and p.propose([]) == [] and p.propose([4]) == []
    assert p.propose([4, 4, 4]) == [4]
    # no match
    assert p.propose([1, 2, 3, 4, 5, 6]) == []
    # a 1-gram would match, but min_n = 2
    assert p.propose([3, 9, 1, 3]) == []


def test_max_drafts_caps_and_batch():
    p = proposer(4, 1, 2)
    history = [1, 2, 3, 4, 5, 6, 1, 2]
    assert p.propose(history) == [3, 4, 5, 6]
    assert p.propose(history, max_drafts=2) == [3, 4]
    assert p.propose(history, max_drafts=9) == [3, 4, 5, 6]
    assert p.propose(history, max_drafts=0) == []
    histories = [history, [], [7, 7], [1, 2, 3]]
    assert p.propose_batch(histories, [4, 4, 4, 4]) == [[3, 4, 5, 6], [], [7], []]
    assert p.propose_batch(histories, [1, 4, 0, 4]) == [[3], [], [], []]
    assert p.propose_batch([], []) == []


def test_bad_inputs():
    p = proposer(2, 1, 2)
    with pytest.raises(ValueError, match="^max_drafts: 1 caps for 2 sequences"):
        p.propose_batch([[1], [2]], [1])
    with pytest.raises(ValueError, match="^token_ids: "):
        p.propose(np.zeros((2, 3), dtype=np.int64))
    with pytest.raises(TypeError, match="^config: "):
        NgramProposer({"method": "ngram", "num_speculative_tokens": 2})
