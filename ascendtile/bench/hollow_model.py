"""The hollow model of `ascendtile bench host --forward hollow`: the default model's architecture and
layer count (SmolLM2: 30 Llama layers, every op of a real forward) with every width shrunk so the
arithmetic is small. A step then costs mostly what a forward costs the host: Python, op dispatch,
and at compilation level >= 1 Dynamo's and Inductor's call path, which is the per-step overhead
issue 15 bounds. Small is not nothing at batch 32: on one thread of a 2-core AVX2 EPYC the products
and the attention over 60 cached keys were ~1.8 ms of work a step
(bench/results/2026-11-29-host-step-floor.md). Weights are random (the tokens are never looked at)."""
from __future__ import annotations

import dataclasses

import torch

# Small enough that the matmuls take microseconds, GQA kept (2 query heads on 1 KV head).
HOLLOW_WIDTHS = {"hidden_size": 64, "intermediate_size": 64, "num_attention_heads": 2, "num_key_value_heads": 1,
                 "head_dim": 32}


def hollow_model(device: torch.device):
    """The default model's config with HOLLOW_WIDTHS, as an `ascendtile.model.LoadedModel` whose
    weights are drawn from N(0, 0.02) (no denormals to slow the CPU) and post-loaded like a
    checkpoint's. Its layer linears are below oneDNN's packing bound
    (layers/linear.py ONEDNN_MIN_WEIGHT_ELEMENTS), so they run aten's matmul: the forward stage
    leaves out the fixed per-call cost (~25–55 µs at 1 thread) that the real model's packed
    linears pay. The vocabulary stays real, so compute_logits and the sampler see the real
    logits shape."""
    from ascendtile.model import LoadedModel, default_model_path
    from ascendtile.model.architectures.registry import model_class
    from ascendtile.model.loading.gguf_loader import GGUFFile

    config = dataclasses.replace(GGUFFile(default_model_path()).config(), **HOLLOW_WIDTHS)
    gen = torch.Generator().manual_seed(0)
    model = model_class(config.architecture)(config)
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(torch.randn(param.shape, generator=gen) * 0.02)
    model = model.to(device)
    model.post_load()
    return LoadedModel(model, None, config)
