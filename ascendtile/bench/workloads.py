"""Prompt workloads of `bench e2e --workload`: what speculative decoding is measured on.

random  plain token ids (synthetic_prompts): no engine can predict them; EOS ignored, so every run
        emits exactly num_prompts × output_len tokens (the peer comparisons).
chat    the demo's chat questions and two more, cycled: answers copy little of the prompt (few n-gram matches).
copy    "rewrite this paragraph with the typos fixed", the paragraph in the prompt: the answer copies
        long spans of it (what prompt-lookup drafts are for: rewrite, extract, edit).

chat and copy prompts go through the model's chat template; their requests stop at EOS (or after
output_len tokens), and a run's tokens/s counts the tokens it emitted. Greedy speculation emits
the same tokens as greedy decoding, so the two runs' rates compare like for like.
"""
from __future__ import annotations

import random

from ascendtile.runtime.cli import DEMO_PROMPTS

WORKLOADS = ("random", "chat", "copy")

CHAT_QUESTIONS = [*DEMO_PROMPTS, "Why is the sky blue?", "Name two uses of a hash table."]

# Plain prose written for this benchmark (no third-party text).
PARAGRAPHS = [
    "The library opens at nine in the morning and closes at six in the evening. Visitors may borrow up to "
    "five books at a time, and each loan lasts for three weeks. Books that are returned late are charged a "
    "small fee for every day past the due date.",
    "Our team meets every Monday to plan the work of the week. Each person describes what they finished, "
    "what they will start next, and anything that is blocking them. The meeting should never take longer "
    "than thirty minutes.",
    "To make the bread, mix the flour, the salt and the yeast in a large bowl. Add warm water slowly and "
    "knead the dough for ten minutes until it is smooth. Leave it to rise for one hour before shaping the "
    "loaf and baking it.",
    "The train to the coast leaves from platform four at a quarter past eight. Passengers with bicycles "
    "should board at the front of the train, where there is space for them. The journey takes about two "
    "hours and there is a small cafe on board.",
    "When the river floods in the spring, the lower fields turn into a shallow lake for several weeks. "
    "Farmers move their animals to the higher pastures and wait for the water to go down before they plant "
    "the new crops.",
    "Please remember to save your work often and to keep a copy of important files on a second drive. A "
    "computer can fail without warning, and a recent backup is the only reliable way to recover what was "
    "lost.",
]


def with_typos(text: str, seed: int, every: int = 7) -> str:
    """text with two adjacent inner letters swapped in every `every`-th word of four letters or more
    (seeded: the same text and seed give the same typos)."""
    rng = random.Random(seed)
    words = text.split(" ")
    for i in range(rng.randrange(every), len(words), every):
        word = words[i]
        letters = [j for j in range(1, len(word) - 2) if word[j].isalpha() and word[j + 1].isalpha()]
        if len(word) >= 4 and letters:
            j = rng.choice(letters)
            words[i] = word[:j] + word[j + 1] + word[j] + word[j + 2:]
    return " ".join(words)


def conversations(workload: str, num_prompts: int) -> list[list[dict[str, str]]]:
    """num_prompts single-turn conversations of the chat or copy workload."""
    if workload == "chat":
        return [[{"role": "user", "content": CHAT_QUESTIONS[i % len(CHAT_QUESTIONS)]}] for i in range(num_prompts)]
    if workload == "copy":
        return [[{"role": "user", "content": "Rewrite this paragraph with the typos fixed. Reply with the paragraph "
                  "only.\n\n" + with_typos(PARAGRAPHS[i % len(PARAGRAPHS)], seed=i)}] for i in range(num_prompts)]
    raise ValueError(f"workload: expected 'chat' or 'copy' for conversations, got {workload!r}")
