"""Writes a tiny HF Llama as a llama.cpp GGUF (shared by the GGUF and tensor-parallel tests): Q/K
rows permuted the way llama.cpp's converter does, every matrix Q8_0 (32-element blocks) unless
`types` says otherwise, every vector F32, a byte-level BPE tokenizer of `vocab_size` tokens."""
from __future__ import annotations

import numpy as np

NAMES = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
         "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
         "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}


def llama_cpp_permute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp convert_hf_to_gguf: per head, rows [first half | second half] -> interleaved pairs."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_llama_gguf(hf_model, path, merges=("a b",), rope_freqs: bool = False, types: dict | None = None) -> None:
    """`hf_model` (a transformers LlamaForCausalLM) as a GGUF file at `path`. rope_freqs: add a
    Llama 3.1-style per-frequency rope factor tensor (which the loader refuses). types: GGUF
    tensor name without ".weight" ("blk.1.attn_v") or module ("attn_v") -> the GGMLQuantizationType
    of that matrix (one gguf.quants can quantize), Q8_0 for the others."""
    import gguf

    c = hf_model.config
    vocab, heads, kv_heads = c.vocab_size, c.num_attention_heads, c.num_key_value_heads
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(c.num_hidden_layers)
    writer.add_context_length(c.max_position_embeddings)
    writer.add_embedding_length(c.hidden_size)
    writer.add_feed_forward_length(c.intermediate_size)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_freq_base(10000.0)  # HF's default rope_theta, which the tiny configs keep
    writer.add_layer_norm_rms_eps(c.rms_norm_eps)
    writer.add_vocab_size(vocab)
    tokens = ["a", "b", "ab"] + [f"c{i}" for i in range(vocab - 5)] + ["<s>", "</s>"]
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types([1] * (vocab - 2) + [3, 3])
    writer.add_token_merges(list(merges))
    writer.add_bos_token_id(vocab - 2)
    writer.add_eos_token_id(vocab - 1)
    writer.add_chat_template("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    if rope_freqs:  # one factor per rotated pair
        writer.add_tensor("rope_freqs.weight", np.ones(c.hidden_size // heads // 2, dtype=np.float32))
    for name, tensor in hf_model.state_dict().items():
        w = tensor.float().numpy()
        if name == "model.embed_tokens.weight":
            target = "token_embd.weight"
        elif name == "model.norm.weight":
            target = "output_norm.weight"
        elif name == "lm_head.weight":
            target = "output.weight"
        else:
            _, _, layer, *rest = name.split(".")
            module, param = ".".join(rest[:-1]), rest[-1]
            target = f"blk.{layer}.{NAMES[module]}.{param}"
            if module == "self_attn.q_proj":
                w = llama_cpp_permute(w, heads)
            elif module == "self_attn.k_proj":
                w = llama_cpp_permute(w, kv_heads)
        if w.ndim == 2:
            base = target.removesuffix(".weight")
            kind = (types or {}).get(base, (types or {}).get(base.rpartition(".")[2], gguf.GGMLQuantizationType.Q8_0))
            writer.add_tensor(target, gguf.quants.quantize(w, kind), raw_dtype=kind)
        else:
            writer.add_tensor(target, w)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
