"""The tiny random Llama the compilation tests compile (2 layers: Inductor on this CPU takes tens
of seconds even for it)."""
from transformers import LlamaConfig

from model.helpers import save_tiny

CONFIG = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, initializer_range=0.1, max_position_embeddings=256)


def save(directory) -> str:
    save_tiny(CONFIG, directory, randomize_norms=True)
    return str(directory)
