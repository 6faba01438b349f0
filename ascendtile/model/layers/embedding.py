"""Vocab-parallel token embedding: each rank holds a contiguous range of the vocabulary's rows,
looks up the ids in its range, writes zeros for the others, and an all-reduce sums the ranks'
rows (exactly one rank contributes each token's row). The tied LM head multiplies by the same
local rows, giving that rank's range of the logits. With a padded share (partition.padded_split)
the last rank's rows past the vocabulary are zero: no id looks them up, and their logits are
trimmed after the gather."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ascendtile.distributed import all_reduce
from ascendtile.model.layers.partition import Share


class VocabParallelEmbedding(nn.Module):
    def __init__(self, share: Share, hidden_size: int) -> None:
        super().__init__()
        self.share = share
        self.weight = nn.Parameter(torch.empty(share.count, hidden_size), requires_grad=False)

    def checkpoint_slice(self, param_name: str, shard: str | None) -> tuple[int, int, int]:
        return 0, self.share.start, self.share.total

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """input_ids [T] -> [T, hidden]."""
        if self.share.count == self.share.total:  # a group of one: every id is local
            return F.embedding(input_ids, self.weight)
        local = input_ids - self.share.start
        inside = (local >= 0) & (local < self.share.count)
        rows = F.embedding(torch.where(inside, local, 0), self.weight)
        return all_reduce(rows.masked_fill_(~inside.unsqueeze(-1), 0))
