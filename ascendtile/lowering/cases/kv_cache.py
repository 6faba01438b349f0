"""reshape_and_cache_flash over real KV layouts and concat_and_cache_mla over the latent cache,
at every block size, storing as is ("auto"); and both writing an int8 cache (ops/_kv_quant.py) at
the NPU's block size (the block size only enters the slot's address): dynamic (each row's scale
into the scale cache) in both dtypes, static in fp16."""
from __future__ import annotations

import triton

from ascendtile.kernels.kv_cache import (
    QUANT_DYNAMIC, QUANT_NONE, QUANT_STATIC, blocks_for, concat_and_cache_mla_kernel, reshape_and_cache_flash_kernel,
)
from ascendtile.lowering.case import LoweringCase, signature_types
from ascendtile.lowering.shape_grid import BLOCK_SIZES, DTYPES

# (name, kv heads, head size): SmolLM2, Llama-3 8B, Llama-2 7B (MHA), Gemma-style 256.
FLASH_MODELS = (("smollm2", 3, 64), ("llama3", 8, 128), ("llama2", 32, 128), ("gemma_like", 4, 256))
# DeepSeek-V2/V3 latent cache: kv_lora_rank 512 + rope dim 64; V2-Lite shares the layout.
MLA_CACHE_LAYOUTS = ((512, 64),)
QUANT_NAMES = {QUANT_NONE: "", QUANT_STATIC: ",int8-static", QUANT_DYNAMIC: ",int8-dynamic"}


def _quants(block_size: int, dtype: str) -> tuple[int, ...]:
    if block_size != 128:
        return (QUANT_NONE,)
    return (QUANT_NONE, QUANT_DYNAMIC) + ((QUANT_STATIC,) if dtype == "fp16" else ())


def _cache_type(quant: int, dtype: str) -> str:
    return f"*{dtype}" if quant == QUANT_NONE else "*i8"


def cases() -> list[LoweringCase]:
    cases = []
    for dtype in DTYPES:
        for block_size in BLOCK_SIZES:
            for quant in _quants(block_size, dtype):
                cache = _cache_type(quant, dtype)
                for name, heads, head_size in FLASH_MODELS:
                    head_block, dim_block = blocks_for(heads, head_size)
                    cases.append(LoweringCase(
                        name=(f"reshape_and_cache_flash[{name},h={heads},d={head_size},bs={block_size},{dtype}"
                              f"{QUANT_NAMES[quant]}]"),
                        kernel=reshape_and_cache_flash_kernel,
                        arg_types=signature_types(reshape_and_cache_flash_kernel, dtype, slot_ptr="*i64",
                                                  key_cache_ptr=cache, value_cache_ptr=cache, k_scale_ptr="*fp32",
                                                  v_scale_ptr="*fp32"),
                        constexprs={"N_HEADS": heads, "HEAD_SIZE": head_size, "BLOCK_SIZE": block_size,
                                    "HEAD_BLOCK": head_block, "DIM_BLOCK": dim_block, "QUANT": quant},
                    ))
                for rank, rope_dim in MLA_CACHE_LAYOUTS:
                    cases.append(LoweringCase(
                        name=f"concat_and_cache_mla[{rank}+{rope_dim},bs={block_size},{dtype}{QUANT_NAMES[quant]}]",
                        kernel=concat_and_cache_mla_kernel,
                        arg_types=signature_types(concat_and_cache_mla_kernel, dtype, slot_ptr="*i64", cache_ptr=cache,
                                                  scale_ptr="*fp32"),
                        constexprs={"RANK": rank, "ROPE_DIM": rope_dim, "BLOCK_SIZE": block_size,
                                    "RANK_BLOCK": triton.next_power_of_2(rank),
                                    "ROPE_BLOCK": triton.next_power_of_2(rope_dim), "QUANT": quant},
                    ))
    return cases
