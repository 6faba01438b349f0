"""Real model shapes every kernel family is lowered for (and the benchmark cases reuse)."""
# Hidden sizes: SmolLM2 576, Llama-3.2-1B 2048, Llama-2-7B 4096, DeepSeek-V2/V3 7168.
HIDDEN_SIZES = (576, 2048, 4096, 7168)
# Llama-family MLP intermediate sizes paired with hidden sizes above (SmolLM2, Llama-3.2-1B, Llama-2-7B, DeepSeek-V2 dense).
INTERMEDIATE_SIZES = (1536, 8192, 11008, 18432)
BLOCK_SIZES = (16, 64, 128)
DTYPES = ("fp16", "bf16")
# Attention (query heads, KV heads): Llama-3 8B (GQA 4) and SmolLM2 (9 / 3, a group padded 3 -> 4);
# head sizes 64 (SmolLM2, Llama-3.2), 80 (partial-rope models), 128 (Llama-2/3), 256 (Gemma).
ATTENTION_HEADS = ((32, 8), (9, 3))
ATTENTION_HEAD_SIZES = (64, 80, 128, 256)
# MLA (kv_lora_rank, rope dim, query heads): DeepSeek-V2/V3 (576 = 512 + 64, 128 heads) and a small
# latent with enough heads for the widest head tile (mla.block_h_for).
MLA_LAYOUTS = ((512, 64, 128), (128, 32, 64))
# Vocabularies: Llama-2 / Mistral, SmolLM2, Qwen2/3.
VOCAB_SIZES = (32000, 49152, 151936)
