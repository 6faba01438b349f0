"""`LLM.chat` prompt ids equal HF transformers' `apply_chat_template(tokenize=True,
add_generation_prompt=True)` on the same GGUF tokenizer: the embedded SmolLM2's (byte-level BPE,
no BOS rule, its own ChatML template) and Gemma 3 270M's (SentencePiece, BOS rule on). The Gemma 3
GGUF carries no chat template, so both sides get the same turn-style template that writes
`{{ bos_token }}` itself: encoding the rendered text with special tokens would give two BOS.
The model behind LLM is the runtime's stub (only the prompt ids matter here)."""
from __future__ import annotations

import pytest

from ascendtile.bench.stub_model import StubConfig, StubModel
from ascendtile.model import LoadedModel, Tokenizer, embedded_model_path
from ascendtile.model.loading.gguf_reader import read_gguf
from ascendtile.runtime import LLM, SamplingParams
from embedded import GEMMA3, SMOLLM2

pytestmark = pytest.mark.slow

CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
     {"role": "assistant", "content": "Hello! How can I help?"}, {"role": "user", "content": "Name a colour."}],
]
TURN_TEMPLATE = ("{{ bos_token }}{% for m in messages %}<start_of_turn>{{ m['role'] }}\n{{ m['content'] }}"
                 "<end_of_turn>\n{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")


# each case in its model's xdist group, whose worker builds that HF tokenizer (with its model) anyway
@pytest.mark.parametrize("name, template, hf_tokenizer", [
    pytest.param("default", None, "hf_smollm2_tokenizer", marks=SMOLLM2),
    pytest.param("gemma3-270m", TURN_TEMPLATE, "hf_gemma3_tokenizer", marks=GEMMA3)])
def test_chat_prompt_ids_equal_hf(request, name, template, hf_tokenizer):
    hf = request.getfixturevalue(hf_tokenizer)  # the session's (tests/embedded.py)
    path = embedded_model_path(name)
    tokenizer = Tokenizer.from_gguf_metadata(read_gguf(path)[0], path)
    if template is not None:
        tokenizer.chat_template = template
    vocab = tokenizer.vocab_size
    llm = LLM(LoadedModel(StubModel(vocab_size=vocab), tokenizer, StubConfig(vocab_size=vocab)), max_model_len=256,
              max_num_seqs=2, num_kv_blocks=64)
    outs = llm.chat(CONVERSATIONS, SamplingParams(temperature=0, max_tokens=1), use_tqdm=False)
    for conversation, out in zip(CONVERSATIONS, outs):
        expected = hf.apply_chat_template(conversation, chat_template=template, tokenize=True,
                                          add_generation_prompt=True, return_dict=False)
        assert out.prompt_token_ids == list(expected)
