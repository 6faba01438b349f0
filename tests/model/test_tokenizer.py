"""Tokenizer rebuilt from the SmolLM2 GGUF metadata vs HF's own GGUF tokenizer: ids, round trip,
chat template rendering; incremental detokenization with multi-byte UTF-8 and BPE merges. HF's
tokenizer is the session's (tests/embedded.py), built with HF's model: these tests run in the smollm2
xdist group, whose worker builds both anyway."""
import json

import pytest

from ascendtile.model import IncrementalDetokenizer, Tokenizer, chat_template, default_model_path
from ascendtile.model.loading.gguf_loader import GGUFFile
from embedded import SMOLLM2

pytestmark = SMOLLM2

TEXTS = [
    "Hello, world!",
    "The year 2024 had 366 days; π≈3.14159 and x = [1, 22, 333].",
    "  leading spaces\n\n\ttabs, accents (éàü), emoji 🤖🚀 and 中文字符.",
    "def f(x):\n    return x ** 2  # comment\n",
]
CHATS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
     {"role": "assistant", "content": "Hello! 👋"}, {"role": "user", "content": "Bye"}],
]


@pytest.fixture(scope="module")
def ours():
    path = default_model_path()
    return Tokenizer.from_gguf_metadata(GGUFFile(path).metadata, path)


@pytest.mark.parametrize("text", TEXTS)
def test_encode_matches_hf_and_round_trips(ours, hf_smollm2_tokenizer, text):
    ids = ours.encode(text)
    assert ids == hf_smollm2_tokenizer.encode(text)
    assert ours.decode(ids) == text


def test_special_tokens(ours):
    assert ours.bos_token_id == 1 and ours.eos_token_ids == {2}
    ids = ours.encode("<|im_start|>user\nhi<|im_end|>")
    assert ids[0] == 1 and ids[-1] == 2 and len(ids) == 5  # specials stay whole
    assert ours.decode(ids) == "user\nhi"
    assert ours.decode(ids, skip_special_tokens=False) == "<|im_start|>user\nhi<|im_end|>"


@pytest.mark.parametrize("messages", CHATS)
@pytest.mark.parametrize("generation_prompt", [True, False])
def test_chat_template_matches_hf(ours, hf_smollm2_tokenizer, messages, generation_prompt):
    expected = hf_smollm2_tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)
    assert ours.apply_chat_template(messages, add_generation_prompt=generation_prompt) == expected


@pytest.mark.parametrize("text", TEXTS)
def test_incremental_detokenizer(ours, text):
    ids = ours.encode(text)
    detok = IncrementalDetokenizer(ours)
    deltas = [detok.feed(i) for i in ids]
    assert "".join(deltas) == text
    assert all("\ufffd" not in d for d in deltas)  # a split UTF-8 character is held back, never emitted


def test_incremental_detokenizer_with_prompt_context(ours):
    prompt = ours.encode("Say hi:")
    reply = ours.encode(" Hi there 🤖<|im_end|>")
    detok = IncrementalDetokenizer(ours, prompt_ids=prompt)
    assert "".join(detok.feed(i) for i in reply) == " Hi there 🤖"  # special token skipped


def test_no_chat_template_is_a_clear_error(ours):
    bare = Tokenizer(ours.backend, None, ours.bos_token, ours.eos_token)
    with pytest.raises(ValueError, match="^chat_template"):
        bare.apply_chat_template(CHATS[0])


def test_from_hf_directory(hf_smollm2_tokenizer, tmp_path):
    hf_smollm2_tokenizer.save_pretrained(tmp_path)  # tokenizer.json + tokenizer_config.json (+ chat template)
    loaded = Tokenizer.from_directory(tmp_path, eos_token_ids=[2])
    for text in TEXTS:
        assert loaded.encode(text) == hf_smollm2_tokenizer.encode(text)
    assert loaded.eos_token_ids == {2} and loaded.bos_token_id == 1
    expected = hf_smollm2_tokenizer.apply_chat_template(CHATS[1], tokenize=False, add_generation_prompt=True)
    assert loaded.apply_chat_template(CHATS[1]) == expected


def test_chat_template_is_read_without_a_load(hf_smollm2_tokenizer, tmp_path):
    """model.chat_template (the CLI's check before a load): the template the loaded tokenizer would
    carry, from the files alone; None without a template or without tokenizer.json."""
    hf_smollm2_tokenizer.save_pretrained(tmp_path)
    template = Tokenizer.from_directory(tmp_path).chat_template
    assert "<|im_start|>" in template and chat_template(str(tmp_path)) == template
    assert chat_template("default") == GGUFFile(default_model_path()).metadata["tokenizer.chat_template"]
    (tmp_path / "chat_template.jinja").unlink(missing_ok=True)  # where newer transformers save it
    config = tmp_path / "tokenizer_config.json"
    config.write_text(json.dumps({k: v for k, v in json.loads(config.read_text()).items() if k != "chat_template"}))
    assert chat_template(str(tmp_path)) is None and Tokenizer.from_directory(tmp_path).chat_template is None
    hf_smollm2_tokenizer.save_pretrained(tmp_path)
    (tmp_path / "tokenizer.json").unlink()
    assert chat_template(str(tmp_path)) is None
