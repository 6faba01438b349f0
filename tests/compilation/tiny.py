"""The tiny random Llama the compilation tests compile (2 layers: Inductor on this CPU takes tens
of seconds even for it), and the paged steps they run it on."""
import torch
from transformers import LlamaConfig

from model.helpers import PagedDriver, save_tiny

CONFIG = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, initializer_range=0.1, max_position_embeddings=256)


def save(directory, seed: int = 0, randomize_norms: bool = True) -> str:
    """The tiny Llama with random weights drawn from `seed`, saved in directory; returns its path.
    randomize_norms=False keeps HF's constant norm weights (its greedy output then repeats itself:
    what speculative decoding's tests need drafts to be accepted on)."""
    save_tiny(CONFIG, directory, seed=seed, randomize_norms=randomize_norms)
    return str(directory)


# prefill (16 tokens), decode of 2, a 3-token chunk, decode of 1: the token count changes every step
STEPS = [{0: list(range(3, 16)), 1: [5, 9, 100]}, {0: [17], 1: [4]}, {1: [6, 7, 8]}, {0: [18]}]


def run_steps(model, compiled=None, blocks_per_seq: int = 4) -> list[torch.Tensor]:
    """Logits of STEPS on a fresh paged cache of `model` (blocks_per_seq blocks per sequence), run
    through `compiled` if given."""
    driver = PagedDriver(model, 2, blocks_per_seq=blocks_per_seq)
    if compiled is not None:
        driver.model = compiled  # the driver calls model(...) and model.compute_logits(...)
    return [driver.step(step) for step in STEPS]
