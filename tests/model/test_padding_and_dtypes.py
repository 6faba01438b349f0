"""Runtime-format edge cases: padding rows of a captured decode batch (slot -1, seqused_k 0) leave
the real rows and the cache untouched; bf16/fp16 loading runs and tracks the fp32 model."""
import pytest
import torch
from transformers import DeepseekV2Config, LlamaConfig

from ascendtile.model import AttentionMetadata, load_model
from model.helpers import PagedDriver, save_tiny

CONFIGS = {
    "llama": LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, initializer_range=0.1),
    "deepseek_v2": DeepseekV2Config(vocab_size=128, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
                                    num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                                    n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2,
                                    first_k_dense_replace=1, kv_lora_rank=32, q_lora_rank=None,
                                    qk_rope_head_dim=16, qk_nope_head_dim=16, v_head_dim=16, n_group=1, topk_group=1,
                                    initializer_range=0.1),
}


def _caches(model):
    return [c.clone() for a in model.attention_layers()
            for c in (getattr(a, n, None) for n in ("key_cache", "value_cache", "kv_cache")) if c is not None]


@pytest.mark.parametrize("arch", sorted(CONFIGS))
def test_padding_rows_are_inert(arch, tmp_path):
    save_tiny(CONFIGS[arch], tmp_path)
    model = load_model(str(tmp_path)).model
    driver = PagedDriver(model, 1)
    driver.step({0: [3, 4, 5, 6, 7]})
    before = _caches(model)
    table = driver.tables[0].clone()
    table[1:] = -1
    # one real decode token (position 5) + two padding rows, as a captured graph of batch 3 feeds them
    meta = AttentionMetadata(
        slot_mapping=torch.tensor([int(table[0]) * 16 + 5, -1, -1]),
        block_tables=torch.stack([table, torch.full_like(table, -1), torch.full_like(table, -1)]),
        cu_seqlens_q=torch.tensor([0, 1, 2, 3], dtype=torch.int32),
        seqused_k=torch.tensor([6, 0, 0], dtype=torch.int32), max_seqlen_q=1, max_seqlen_k=6)
    with torch.no_grad():
        padded = model.compute_logits(model(torch.tensor([9, 0, 0]), torch.tensor([5, 0, 0]), meta))
    after = _caches(model)
    for b, a in zip(before, after):
        changed = (b != a) & ~(b.isnan() & a.isnan())
        assert changed.any(dim=tuple(range(1, b.dim()))).nonzero().flatten().tolist() == [int(table[0])]
    unpadded = PagedDriver(model, 1)
    unpadded.step({0: [3, 4, 5, 6, 7]})
    torch.testing.assert_close(padded[0], unpadded.step({0: [9]})[0], rtol=0, atol=1e-5)
    assert torch.isfinite(padded).all()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_load_tracks_fp32(dtype, tmp_path):
    save_tiny(CONFIGS["llama"], tmp_path)
    full = load_model(str(tmp_path)).model
    half = load_model(str(tmp_path), dtype=dtype).model
    assert half.model.layers[0].self_attn.qkv_proj.weight.dtype == dtype
    assert half.model.layers[0].self_attn.rotary.cos_sin_cache.dtype == dtype
    ref = PagedDriver(full, 1).step({0: list(range(3, 12))})
    got = PagedDriver(half, 1, dtype=dtype).step({0: list(range(3, 12))})
    assert got.dtype == torch.float32  # compute_logits always returns fp32
    assert (got - ref).abs().max() < 0.05 * ref.abs().max()
