"""Session-scoped fixtures for the embedded models and their HF transformers references (each is
tens of seconds to build on this CPU), built once per test process. The tests that use one carry
its xdist_group mark (SMOLLM2, GEMMA3), so under `--dist loadgroup` one worker builds it once per
run. Registered for every test by tests/conftest.py."""
from __future__ import annotations

import pytest
import torch

from ascendtile.bench.hf_gguf import hf_from_gguf
from ascendtile.model import LoadedModel, embedded_model_path, load_model

SMOLLM2 = pytest.mark.xdist_group("smollm2")
GEMMA3 = pytest.mark.xdist_group("gemma3_270m")

# SmolLM2 prompts whose greedy continuations have no near-ties with HF in the first 32 tokens (the
# "capital of France" chat prompt has one: see reference-facts) and do not hit EOS early.
PARITY = ["The capital of Germany is", "def fibonacci(n):", "Once upon a time, in a small village,"]
NEW_TOKENS = 32


def _hf_pair(name: str):
    """HF transformers' own fp32 model and tokenizer from the embedded GGUF, its metadata parsed
    once for both (hf_gguf.py: ~23 s for Gemma 3, ~11 s for SmolLM2 on a 2-core AVX2 CPU)."""
    return hf_from_gguf(embedded_model_path(name), torch.float32)


@pytest.fixture(scope="session")
def smollm2() -> LoadedModel:
    """The embedded SmolLM2-135M-Instruct, ours (fp32, CPU reference ops)."""
    return load_model("default")


@pytest.fixture(scope="session")
def hf_smollm2_pair():
    return _hf_pair("default")


@pytest.fixture(scope="session")
def hf_smollm2(hf_smollm2_pair):
    """HF transformers' own fp32 loading of the same GGUF."""
    return hf_smollm2_pair[0]


@pytest.fixture(scope="session")
def hf_smollm2_tokenizer(hf_smollm2_pair):
    return hf_smollm2_pair[1]


@pytest.fixture(scope="session")
def hf_smollm2_greedy(hf_smollm2, hf_smollm2_tokenizer) -> list[list[int]]:
    """HF generate's NEW_TOKENS greedy tokens after each PARITY prompt (HF's own tokenizer ids)."""
    tokens = []
    for prompt in PARITY:
        ids = hf_smollm2_tokenizer(prompt)["input_ids"]
        with torch.inference_mode():
            out = hf_smollm2.generate(torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False)
        tokens.append(out[0, len(ids):].tolist())
    assert all(len(t) == NEW_TOKENS for t in tokens)
    return tokens


@pytest.fixture(scope="session")
def gemma3() -> LoadedModel:
    """The embedded Gemma 3 270M, ours (fp32)."""
    return load_model("gemma3-270m")


@pytest.fixture(scope="session")
def hf_gemma3_pair():
    return _hf_pair("gemma3-270m")


@pytest.fixture(scope="session")
def hf_gemma3(hf_gemma3_pair):
    return hf_gemma3_pair[0]


@pytest.fixture(scope="session")
def hf_gemma3_tokenizer(hf_gemma3_pair):
    return hf_gemma3_pair[1]
