"""The vLLM plugin (entry point `ascendtile` in the `vllm.general_plugins` group): vLLM runs its
norms, activations and rotary embeddings on our ops (custom_ops) and its decoder attention on our
KV-cache write and unified attention (attention: the backend behind the CPU_ATTN name), with
per-op call counters (counters). vLLM loads it in every process it starts, before the model is
built; `VLLM_PLUGINS` (a comma-separated list of plugin names) chooses which plugins load, so
`VLLM_PLUGINS=` (empty) runs vLLM without it."""
from __future__ import annotations

import importlib.util
import logging

logger = logging.getLogger(__name__)


def register() -> None:
    """Register our replacements with vLLM: the CustomOps, then our attention backend as CPU_ATTN
    (the backend vLLM's CPU platform selects). With vllm-ascend installed this does nothing:
    vllm-ascend registers its own classes under the same names when its worker starts, and vLLM
    refuses a second class for a name, so one of the two has to stand aside (vllm-ascend wins)."""
    if importlib.util.find_spec("vllm_ascend") is not None:
        logger.warning("ascendtile vLLM plugin: vllm-ascend is installed and registers its own ops under the same "
                       "names; ascendtile's are not registered")
        return
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

    from ascendtile.integrations.vllm.custom_ops import register_custom_ops

    names = register_custom_ops()
    logger.info("ascendtile vLLM plugin: %s run on torch.ops.ascend", ", ".join(names) or "nothing new")
    # By dotted path: vLLM imports the class when it selects a backend, after this returns.
    register_backend(AttentionBackendEnum.CPU_ATTN, "ascendtile.integrations.vllm.attention.AscendtileAttentionBackend")
