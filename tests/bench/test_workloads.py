"""The prompt workloads of `bench e2e --workload`."""
import pytest

from ascendtile.bench.workloads import CHAT_QUESTIONS, PARAGRAPHS, conversations, with_typos


def test_typos_swap_letters_inside_words_only_and_repeat_per_seed():
    text = PARAGRAPHS[0]
    typo = with_typos(text, seed=3)
    assert typo == with_typos(text, seed=3) and typo != text and typo != with_typos(text, seed=4)
    words, changed = text.split(" "), typo.split(" ")
    assert len(words) == len(changed)
    diffs = [(a, b) for a, b in zip(words, changed) if a != b]
    assert len(diffs) >= len(words) // 14
    for a, b in diffs:  # the same letters, first and last kept
        assert sorted(a) == sorted(b) and a[0] == b[0] and a[-1] == b[-1]


def test_conversations_cycle_their_texts():
    copy = conversations("copy", len(PARAGRAPHS) + 1)
    assert len(copy) == len(PARAGRAPHS) + 1 and all(len(c) == 1 and c[0]["role"] == "user" for c in copy)
    assert "typos fixed" in copy[0][0]["content"] and copy[0][0]["content"].endswith(with_typos(PARAGRAPHS[0], 0))
    chat = conversations("chat", 2)
    assert [c[0]["content"] for c in chat] == CHAT_QUESTIONS[:2]
    with pytest.raises(ValueError, match="workload"):
        conversations("random", 1)
