"""The model zoo: ModelConfig (model_config.py, the fields the classes read), the decoder
skeleton (base.py), one file per architecture (llama.py, gemma3.py, deepseek_v2.py) and
registry.py, which maps HF `architectures[0]` names to these classes. Adding an architecture:
its file here and one line in registry.py. Imports only layers/ and attention_metadata."""
