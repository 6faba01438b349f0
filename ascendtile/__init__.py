"""ascendtile: kernel-first LLM inference for Huawei Ascend NPUs.

Importing the package registers every op as torch.ops.ascend.*. The offline API is here too,
vLLM-style (`from ascendtile import LLM, SamplingParams`), loaded on first use: `import ascendtile`
alone never imports the runtime, the model zoo or their dependencies.
"""
from ascendtile import ops  # noqa: F401  (registers torch.ops.ascend.*)

__version__ = "0.1.0"

_RUNTIME_EXPORTS = ("LLM", "SamplingParams", "RequestOutput", "CompletionOutput")


def __getattr__(name: str):
    if name in _RUNTIME_EXPORTS:
        from ascendtile import runtime

        return getattr(runtime, name)
    raise AttributeError(f"module 'ascendtile' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_RUNTIME_EXPORTS))
