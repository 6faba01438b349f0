"""The flat-batch attention inputs of one forward step: the contract between runtime and model.

A step holds B sequences and T new tokens laid end to end (no padding to [B, S]). Sequence b's
new tokens are rows cu_seqlens_q[b]:cu_seqlens_q[b+1]; they are the LAST q_len of its seqused_k[b]
tokens (cached context first), so causal masking is bottom-right aligned. A sequence with
seqused_k[b] == 0 (a padding row of a captured decode graph) sees no keys: its output is 0.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

import ascendtile.ops as ak


@dataclass
class AttentionMetadata:
    slot_mapping: torch.Tensor  # [T] int64: block_id * block_size + offset of each new token; -1 = padding, not written
    block_tables: torch.Tensor  # [B, max_blocks_per_seq] int32: physical block ids; entries past a sequence's blocks are -1 and never read
    cu_seqlens_q: torch.Tensor  # [B + 1] int32: prefix sums of new-token counts, cu_seqlens_q[0] = 0, cu_seqlens_q[-1] = T
    seqused_k: torch.Tensor  # [B] int32: KV length per sequence after this step (cached context + new tokens)
    max_seqlen_q: int  # max new tokens of any sequence (host int: no device sync)
    max_seqlen_k: int  # max seqused_k (host int)
    # True once validate() passed: the layers then run their per-step ops (rope, KV write, attention)
    # without re-checking these fields in every layer (~180 op calls per decode step).
    validated: bool = False

    def validate(self, positions: torch.Tensor, block_size: int, num_blocks: int) -> None:
        """Check the step once (ValueError/TypeError naming the field): positions [T] and these
        fields against a paged cache of num_blocks blocks of block_size."""
        ak.check_paged_step(positions, self.slot_mapping, self.block_tables, self.cu_seqlens_q, self.seqused_k,
                            self.max_seqlen_q, self.max_seqlen_k, block_size, num_blocks)
        self.validated = True

    @property
    def num_seqs(self) -> int:
        return self.seqused_k.shape[0]
