"""The embedded Gemma 3 270M (Q4_K_M GGUF, the second real model): ours vs HF transformers' own
GGUF loading of the same file (same dequantized weights, fp32): the SentencePiece tokenizer
rebuilt from metadata (ids, decode, incremental detokenization), config, prefill and cached
greedy decoding through the paged cache, a prompt longer than the 512-token sliding window, and
the runtime's greedy generate vs HF generate. The models and HF's tokenizer are the session's
(tests/embedded.py).

Bound: max |Δlogit| < 5e-4 over the 262144-entry vocab (fp32 both sides, summation order only;
observed 0 to ~1e-5 on this CPU).
"""
from pathlib import Path

import pytest
import torch

from ascendtile.model import AttentionMetadata, IncrementalDetokenizer, Tokenizer
from ascendtile.runtime import LLM, SamplingParams
from embedded import GEMMA3
from model.helpers import check_parity

pytestmark = [pytest.mark.slow, GEMMA3]  # ~2.5 GB of fp32 models

ATOL = 5e-4
TEXT = (Path(__file__).parents[1] / "data" / "public_domain.txt").read_text()
PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time, in a small village,"]
TEXTS = ["Hello world", "  leading,  double   and trailing spaces  ", "tabs\tand\nnewlines\n\n\n end",
         "def f(x):\n    return x ** 2\n", "12345 3.14159 1e-10", "日本語のテキストと中文", "naïve façade Ünïcödé",
         "emoji 🎉🚀, rare 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 and a bell \u0007 (byte fallback)", "a" * 50, "", " ", "\n",
         "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n", "text with <bos> inside",
         "[multimodal] <unused0>", TEXT]


@pytest.mark.parametrize("add_special_tokens", [True, False])
def test_tokenizer_ids_equal_hf(gemma3, hf_gemma3_tokenizer, add_special_tokens):
    for text in TEXTS:
        assert gemma3.tokenizer.encode(text, add_special_tokens) == hf_gemma3_tokenizer.encode(text, add_special_tokens=add_special_tokens), text


def test_tokenizer_decode_and_special_tokens(gemma3, hf_gemma3_tokenizer):
    tok = gemma3.tokenizer
    assert (tok.bos_token_id, tok.eos_token_ids, tok.vocab_size) == (2, {1}, 262144)
    assert tok.encode("hi")[0] == 2 and tok.encode("<end_of_turn>", False) == [hf_gemma3_tokenizer.convert_tokens_to_ids("<end_of_turn>")]
    for text in TEXTS:
        ids = hf_gemma3_tokenizer.encode(text)
        for skip in (True, False):
            assert tok.decode(ids, skip) == hf_gemma3_tokenizer.decode(ids, skip_special_tokens=skip), text
        if "<" not in text:
            assert tok.decode(tok.encode(text)) == text


def test_incremental_detokenizer_reproduces_the_full_decode(gemma3):
    text = "Byte fallback: 🎉🚀 𝔘𝔫𝔦𝔠𝔬𝔡𝔢, 日本語, and  spaces\n\n\n done."
    prompt, completion = gemma3.tokenizer.encode("Say:"), gemma3.tokenizer.encode(text, False)
    detok = IncrementalDetokenizer(gemma3.tokenizer, prompt)
    pieces = [detok.feed(i) for i in completion]
    assert "".join(pieces) == detok.text == gemma3.tokenizer.decode(completion) == text


def test_unknown_gguf_tokenizer_model_is_refused():
    with pytest.raises(ValueError, match="^my.gguf: GGUF tokenizer model 'bert' is not supported"):
        Tokenizer.from_gguf_metadata({"tokenizer.ggml.model": "bert", "tokenizer.ggml.tokens": ["a"]}, "my.gguf")


def test_config_matches_hf(gemma3, hf_gemma3):
    c, h = gemma3.config, hf_gemma3.config
    assert c.architecture == "Gemma3ForCausalLM" and c.layer_types == h.layer_types
    assert "full_attention" in c.layer_types and "sliding_attention" in c.layer_types
    assert (c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads, c.head_dim) == (
        h.hidden_size, h.num_hidden_layers, h.num_attention_heads, h.num_key_value_heads, h.head_dim)
    assert c.sliding_window == h.sliding_window == 512 and c.rms_norm_eps == h.rms_norm_eps
    assert c.rope_theta == h.rope_parameters["full_attention"]["rope_theta"]
    assert c.local_rope_theta == h.rope_parameters["sliding_attention"]["rope_theta"]
    assert c.attention_scale == h.query_pre_attn_scalar ** -0.5 and c.tie_word_embeddings
    assert gemma3.model.lm_head is None  # no output.weight in the file: tied to token_embd


def test_prefill_and_cached_greedy_decode(gemma3, hf_gemma3):
    prompts = [gemma3.tokenizer.encode(p) for p in PROMPTS]
    worst = check_parity(gemma3.model, hf_gemma3, prompts, decode_steps=8, atol=ATOL)
    print(f"max |Δlogit| {worst:.2e}")


def test_prompt_longer_than_the_sliding_window(gemma3, hf_gemma3):
    """A 600-token prompt: the sliding layers must see only the last 512 keys (HF masks the same),
    in the prefill and in the decode steps that follow through the paged cache."""
    ids = gemma3.tokenizer.encode(TEXT)[:600]
    assert len(ids) == 600 > gemma3.config.sliding_window
    model, block_size = gemma3.model, 16
    blocks = torch.randperm(64, generator=torch.Generator().manual_seed(0))[:48].to(torch.int32) + 1
    model.allocate_kv_cache(65, block_size, torch.float32, "cpu")

    def step(new: list[int], start: int) -> torch.Tensor:
        pos = torch.arange(start, start + len(new))
        end = start + len(new)
        meta = AttentionMetadata(
            slot_mapping=(blocks[pos // block_size].long() * block_size + pos % block_size),
            block_tables=blocks[None], cu_seqlens_q=torch.tensor([0, len(new)], dtype=torch.int32),
            seqused_k=torch.tensor([end], dtype=torch.int32), max_seqlen_q=len(new), max_seqlen_k=end)
        with torch.no_grad():
            return model.compute_logits(model(torch.tensor(new), pos, meta)[-4:])

    def reference(seq: list[int]) -> torch.Tensor:
        with torch.no_grad():
            return hf_gemma3(torch.tensor([seq]), logits_to_keep=4).logits[0].float()

    got, seq = step(ids, 0), list(ids)
    assert (got - reference(seq)).abs().max().item() < ATOL
    for _ in range(4):
        seq.append(int(got[-1].argmax()))
        got = step(seq[-1:], len(seq) - 1)
        ref = reference(seq)[-1]
        assert int(got[-1].argmax()) == int(ref.argmax())
        assert (got[-1] - ref).abs().max().item() < ATOL


def test_runtime_greedy_equals_hf_generate(gemma3, hf_gemma3):
    """LLM.generate (batched, paged, prefix caching, graph buckets) gives HF generate's tokens."""
    new_tokens = 24
    llm = LLM(gemma3, max_model_len=128, max_num_seqs=4, block_size=16)
    outs = llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=new_tokens), use_tqdm=False)
    for prompt, out in zip(PROMPTS, outs):
        ids = gemma3.tokenizer.encode(prompt)
        assert out.prompt_token_ids == ids and ids[0] == 2  # <bos>
        with torch.inference_mode():
            ref = hf_gemma3.generate(torch.tensor([ids]), max_new_tokens=new_tokens, do_sample=False)[0, len(ids):].tolist()
        assert out.outputs[0].token_ids == ref[: len(out.outputs[0].token_ids)], prompt
        assert len(out.outputs[0].token_ids) == len(ref), prompt  # both stop at <eos> or run to the end
        assert out.outputs[0].text == gemma3.tokenizer.decode(ref)
