"""rotary_embedding: GQA layouts of real models, neox and GPT-J, full and partial rotation, and the
rotated span at an offset with inverse rotation (DeepSeek-V4's rope: the last 64 dims, GPT-J)."""
from __future__ import annotations

from ascendtile.kernels.rope import blocks_for, rotary_embedding_kernel
from ascendtile.lowering.case import LoweringCase, signature_types
from ascendtile.lowering.shape_grid import DTYPES

# (name, query heads, key heads, head_size, rot_dim): Llama/Qwen GQA layouts and DeepSeek-V2's
# 128 heads of 192 dims rotating 64 (plus its single shared k_pe "head" of 64).
MODELS = (
    ("smollm2", 9, 3, 64, 64),
    ("llama3", 32, 8, 128, 128),
    ("gemma_like", 8, 4, 256, 256),
    ("partial80", 32, 32, 80, 40),
    ("deepseek_v2", 128, 1, 192, 64),
)


# (name, query heads, key heads, head_size, rot_dim, rope_dim_offset, inverse): vLLM's DeepSeek-V4
# scaling rope rotates the last 64 of 512 dims (offset 448), forward and inverse (its o path).
OFFSET_MODELS = (("deepseek_v4_inverse", 64, 1, 512, 64, 448, True),)


def _case(dtype: str, name: str, nq: int, nk: int, head_size: int, rot_dim: int, is_neox: bool, offset: int,
          inverse: bool) -> LoweringCase:
    q_block, half_block = blocks_for(nq, rot_dim // 2, is_neox)
    span = f",offset={offset}" if offset else ""
    return LoweringCase(
        name=(f"rotary_embedding[{name},d={head_size},rot={rot_dim}{span},{'neox' if is_neox else 'gptj'}"
              f"{',inverse' if inverse else ''},{dtype}]"),
        kernel=rotary_embedding_kernel,
        arg_types=signature_types(rotary_embedding_kernel, dtype, pos_ptr="*i64", cache_ptr="*fp32"),
        constexprs={"NQ": nq, "NK": nk, "HALF": rot_dim // 2, "IS_NEOX": is_neox, "HAS_KEY": True,
                    "ROPE_OFFSET": offset, "INVERSE": inverse,
                    "Q_HEAD_BLOCK": q_block, "K_HEAD_BLOCK": blocks_for(nk, rot_dim // 2, is_neox)[0],
                    "HALF_BLOCK": half_block},
    )


def cases() -> list[LoweringCase]:
    cases = []
    for dtype in DTYPES:
        for name, nq, nk, head_size, rot_dim in MODELS:
            for is_neox in (True, False):
                cases.append(_case(dtype, name, nq, nk, head_size, rot_dim, is_neox, 0, False))
        for name, nq, nk, head_size, rot_dim, offset, inverse in OFFSET_MODELS:
            cases.append(_case(dtype, name, nq, nk, head_size, rot_dim, False, offset, inverse))
    return cases
