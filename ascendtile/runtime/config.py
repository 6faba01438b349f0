"""EngineConfig: the runtime's limits, and how many KV blocks the cache gets."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ascendtile.compilation import CompilationConfig
from ascendtile.runtime.speculative_config import SpeculativeConfig

CPU_KV_CACHE_BYTES = 1 << 30  # default KV cache on CPU (host memory is not probed)
DEVICE_MEMORY_UTILIZATION = 0.9  # share of free NPU/CUDA memory the KV cache may take


@dataclass
class EngineConfig:
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    block_size: int
    num_kv_blocks: int
    enable_prefix_caching: bool
    graph: str  # "auto" | "off"
    device: torch.device
    dtype: torch.dtype
    compilation: CompilationConfig = field(default_factory=CompilationConfig)
    speculative_config: SpeculativeConfig | None = None  # None: no speculative decoding
    kv_cache_dtype: str = "auto"  # "auto": the cache in dtype; "int8": int8 with dynamic scales


def resolve_dtype(dtype: torch.dtype | str) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    names = {"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16, "fp16": torch.float16,
             "half": torch.float16, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}
    if dtype not in names:
        raise ValueError(f"dtype: {dtype!r} is not one of {sorted(names)}")
    return names[dtype]


def kv_cache_blocks(bytes_per_block: int, device: torch.device, *, num_blocks: int | None,
                  memory_bytes: int | None, max_model_len: int, max_num_seqs: int, block_size: int,
                  activation_bytes: int) -> int:
    """An explicit block count wins, then an explicit byte budget; otherwise on NPU/CUDA the
    free device memory (after the weights, minus an activation reserve) times 0.9, and on CPU
    1 GiB — both capped at what max_num_seqs full-length sequences can use."""
    if num_blocks is not None:
        if num_blocks < 1:
            raise ValueError(f"num_kv_blocks: must be >= 1, got {num_blocks}")
        return num_blocks
    if memory_bytes is None:
        if device.type in ("npu", "cuda"):
            free, _ = getattr(torch, device.type).mem_get_info(device)
            memory_bytes = int(free * DEVICE_MEMORY_UTILIZATION) - activation_bytes
        else:
            memory_bytes = CPU_KV_CACHE_BYTES
    blocks = min(memory_bytes // bytes_per_block, max_num_seqs * -(-max_model_len // block_size))
    if blocks < 1:
        raise ValueError(f"kv_cache_memory: {memory_bytes} bytes hold no {bytes_per_block}-byte KV block")
    return int(blocks)
