"""w4a16_linear at the tiles its launcher picks for real models' linears: SmolLM2-135M (576 ->
960 merged qkv, 576 o_proj, 3072 merged gate/up; 1536 -> 576 down) and Gemma 3 270M (640 -> 1024
q_proj, 4096 merged gate/up; 2048 -> 640 down, 1024 -> 640 o_proj), group sizes 32/64/128 (where they
divide K), per channel and two that force narrower K steps, single-token decode, a decode batch and a prefill chunk. Shapes that
pick the same tiles share one case (M, N and K are runtime arguments)."""
from __future__ import annotations

import torch

from ascendtile.kernels.w4a16 import groups_per_block, tiles_for, w4a16_linear_kernel
from ascendtile.lowering.case import LoweringCase, signature_types

# (model, K, N) of the linears above.
LINEARS = (
    ("smollm2", 576, 960), ("smollm2", 576, 576), ("smollm2", 576, 3072), ("smollm2", 1536, 576),
    ("gemma3", 640, 1024), ("gemma3", 640, 4096), ("gemma3", 2048, 640), ("gemma3", 1024, 640),
)
GROUP_SIZES = (32, 64, 128)
# Group sizes that are multiples of 32 but neither divide nor are multiples of 128: the launcher's
# 32- and 64-wide K steps.
ODD_GROUPS = ((1536, 96), (1536, 192))
TOKENS = (1, 32, 2048)
# The cube's input dtypes: fp32 activations run an fp32 dot (see kernels/w4a16.py).
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


def _picked_tiles(dtype: torch.dtype) -> dict[tuple[int, int, int, int], str]:
    """(BLOCK_M, BLOCK_N, BLOCK_K, GROUPS_PER_BLOCK) the launcher picks -> the first shape that
    picks it."""
    shapes = [(f"{model} {k}->{n}", k, g) for model, k, n in LINEARS for g in (*GROUP_SIZES, k) if k % g == 0]
    shapes += [(f"k={k}", k, g) for k, g in ODD_GROUPS]
    picked: dict[tuple, str] = {}
    for label, k, group_size in shapes:
        for m in TOKENS:
            block_m, block_n, block_k = tiles_for(m, k, group_size, dtype)
            tile = (block_m, block_n, block_k, groups_per_block(block_k, group_size))
            picked.setdefault(tile, f"{label} g={group_size} m={m}")
    return picked


def cases() -> list[LoweringCase]:
    cases = []
    for dtype, torch_dtype in DTYPES.items():
        for (block_m, block_n, block_k, gpb), first in sorted(_picked_tiles(torch_dtype).items()):
            cases.append(LoweringCase(
                name=f"w4a16_linear[{block_m}x{block_n}x{block_k}/{gpb}g,{dtype}] ({first})",
                kernel=w4a16_linear_kernel,
                arg_types=signature_types(w4a16_linear_kernel, dtype, qw_ptr="*i8", scale_ptr="*fp32",
                                          min_ptr="*fp32", M="i32", N="i32", K="i32"),
                constexprs={"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k, "GROUPS_PER_BLOCK": gpb,
                            "HAS_BIAS": True, "UPCAST_DOT": False},
                expect_mode="mix",
            ))
    return cases
