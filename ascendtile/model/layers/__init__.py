"""nn.Module layers on torch.ops.ascend, shared by the architectures: MHA/GQA attention and
DeepSeek MLA over paged caches, Linear (float or W8A8, merged projections), RMSNorm, gated MLP,
DeepSeek MoE, rotary embedding and HF rope scaling; tensor-parallel shares, column/row-parallel
linears and the vocab-parallel embedding. Imports only ascendtile.ops, ascendtile.distributed and
ascendtile.model.attention_metadata."""
