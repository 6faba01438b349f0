"""Real model shapes every kernel must lower for (SmolLM2 576, Llama-2/3 2048/4096,
DeepSeek-V2/V3 7168; head dims 64/128, MLA 192 (q nope+rope) and 576 (latent + rope))."""
HIDDEN_SIZES = (576, 2048, 4096, 7168)
HEAD_DIMS = (64, 128, 192, 576)
BLOCK_SIZES = (16, 64, 128)
DTYPES = ("fp16", "bf16")
# Llama-family MLP intermediate sizes paired with hidden sizes above (SmolLM2, Llama-3.2-1B, Llama-2-7B, DeepSeek-V2 dense).
INTERMEDIATE_SIZES = (1536, 8192, 11008, 18432)
