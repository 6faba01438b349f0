"""w4a16_linear at the tiles its launcher picks for real models' linears: SmolLM2-135M (576 ->
960 merged qkv, 576 o_proj, 3072 merged gate/up; 1536 -> 576 down) and Gemma 3 270M (640 -> 1024
q_proj, 4096 merged gate/up; 2048 -> 640 down, 1024 -> 640 o_proj), group sizes 32/64/128 (where
they divide K) and per channel, at single-token decode, decode batches of 32 and 64 and a prefill
chunk, on the gate target's cube cores. Shapes that pick the same tiles share one case (M, N and
K are runtime arguments). Besides those, every (BLOCK_M, BLOCK_N) the launcher can pick at its
largest plan: the longest K step with the most groups in it (groups of 32)."""
from __future__ import annotations

import torch

from ascendtile.kernels.w4a16 import (
    BLOCK_KS, BLOCK_MS, BLOCK_NS, groups_per_block, max_block_k, tiles_for, w4a16_linear_kernel,
)
from ascendtile.lowering.case import LoweringCase, signature_types

# (model, K, N) of the linears above.
LINEARS = (
    ("smollm2", 576, 960), ("smollm2", 576, 576), ("smollm2", 576, 3072), ("smollm2", 1536, 576),
    ("gemma3", 640, 1024), ("gemma3", 640, 4096), ("gemma3", 2048, 640), ("gemma3", 1024, 640),
)
GROUP_SIZES = (32, 64, 128)
TOKENS = (1, 32, 64, 2048)
TARGET_CUBE_CORES = 20  # Ascend910B4, the gate's target
# The cube's input dtypes: fp32 activations run an fp32 dot (see kernels/w4a16.py).
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


def _picked_tiles(dtype: torch.dtype) -> dict[tuple[int, int, int, int], str]:
    """(BLOCK_M, BLOCK_N, BLOCK_K, GROUPS_PER_BLOCK) -> what picks it: the first real shape, or
    the largest plan of a (BLOCK_M, BLOCK_N)."""
    picked: dict[tuple, str] = {}
    for model, k, n in LINEARS:
        for group_size in (*(g for g in GROUP_SIZES if k % g == 0), k):
            for m in TOKENS:
                block_m, block_n, block_k = tiles_for(m, n, k, group_size, dtype, TARGET_CUBE_CORES)
                tile = (block_m, block_n, block_k, groups_per_block(block_k, group_size))
                picked.setdefault(tile, f"{model} {k}->{n} g={group_size} m={m}")
    for block_m in BLOCK_MS:
        for block_n in BLOCK_NS:
            block_k = max_block_k(block_m, block_n, dtype)
            if block_k >= BLOCK_KS[-1]:
                picked.setdefault((block_m, block_n, block_k, block_k // BLOCK_KS[-1]), "largest plan")
    return picked


def cases() -> list[LoweringCase]:
    cases = []
    for dtype, torch_dtype in DTYPES.items():
        for (block_m, block_n, block_k, gpb), why in sorted(_picked_tiles(torch_dtype).items()):
            cases.append(LoweringCase(
                name=f"w4a16_linear[{block_m}x{block_n}x{block_k}/{gpb}g,{dtype}] ({why})",
                kernel=w4a16_linear_kernel,
                arg_types=signature_types(w4a16_linear_kernel, dtype, qw_ptr="*i8", scale_ptr="*fp32",
                                          min_ptr="*fp32", M="i32", N="i32", K="i32"),
                constexprs={"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k, "GROUPS_PER_BLOCK": gpb,
                            "HAS_BIAS": True, "UPCAST_DOT": False},
                expect_mode="mix",
            ))
    return cases
