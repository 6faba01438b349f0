"""w4a16_linear (group-wise 4-bit weights, fp16/bf16/fp32 activations) over real models' linears x
token counts. Decode is weight-bandwidth bound: the roofline bytes are the packed weight (N·K/2),
its fp32 scales and mins (8·N·K/group_size), the activations and the output. No torch_npu
baseline: its weight-only quant matmul (npu_weight_quant_batchmatmul) takes int4 with per-group
scale and offset in another packing, which a case would have to repack first."""
from __future__ import annotations

import torch

from ascendtile.bench.cases import KernelCase, bench_cases, element_size, token_counts

# (K, N): SmolLM2-135M merged qkv and gate/up, down; Gemma 3 270M merged gate/up, down.
LINEARS = ((576, 960), (576, 3072), (1536, 576), (640, 4096), (2048, 640))
GROUP_SIZE = 32  # GGUF Q4_0 / Q4_1 blocks, the most scale traffic of the usual group sizes


def _w4a16_linear(m: int, k: int, n: int, group_size: int, dtype: torch.dtype) -> KernelCase:
    def setup(device):
        x = torch.randn(m, k, dtype=dtype, device=device)
        qweight = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, device=device)
        scales = torch.rand(n, k // group_size, device=device) / 100
        mins = -8 * scales
        return lambda: torch.ops.ascend.w4a16_linear(x, qweight, scales, mins, group_size, None)

    return KernelCase(
        "w4a16", "w4a16_linear", {"m": m, "k": k, "n": n, "group_size": group_size}, dtype,
        bytes_moved=n * k // 2 + 8 * n * k // group_size + (m * k + m * n) * element_size(dtype),
        flops=2 * m * n * k + 2 * n * k * -(-m // 128),  # the GEMM, and a dequantization per 128-row tile
        setup=setup,
    )


@bench_cases("w4a16")
def _cases(dtype: torch.dtype, quick: bool) -> list[KernelCase]:
    return [_w4a16_linear(m, k, n, GROUP_SIZE, dtype) for k, n in LINEARS[:1 if quick else None] for m in token_counts(quick)]
