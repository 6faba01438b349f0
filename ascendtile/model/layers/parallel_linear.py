"""Megatron-style tensor-parallel linears over `Linear`. Column-parallel: each rank holds a range
of output rows of every merged sub-matrix (its q, k and v heads; its gate and up rows), so the
merged matmul stays one matmul and its output feeds the rank's own heads without communication.
Row-parallel: each rank holds a range of input columns and multiplies the matching slice of the
activation; the partial products are summed by an all-reduce, and the bias is added once after it.
A row-parallel linear built with `reduce_results=False` returns its rank's partial product instead
(rank 0 adds the bias), for a caller that sums several of them first and reduces once (MoE).
`checkpoint_slice` tells the weight loader which part of each checkpoint tensor a rank keeps.
W4A16 shards like the float weight: a column-parallel rank keeps its rows of qweight, scales and
mins; a row-parallel rank its columns, which must be whole groups (to_w4a16_shell refuses a share
that splits one), so it keeps qweight's bytes and the scales and mins of its groups."""
from __future__ import annotations

import torch

from ascendtile.distributed import all_reduce
from ascendtile.model.layers.linear import Linear
from ascendtile.model.layers.partition import Share


class ColumnParallelLinear(Linear):
    def __init__(self, in_features: int, shares: list[Share], bias: bool = False,
                 shard_names: list[str] | None = None) -> None:
        """shares: this rank's rows of each merged sub-matrix, in shard_names order (one share
        for an unmerged projection)."""
        if shard_names and len(shard_names) != len(shares):
            raise ValueError(f"shard_names: {len(shard_names)} names for {len(shares)} shares")
        super().__init__(in_features, [s.count for s in shares], bias=bias, shard_names=shard_names)
        self.shares = shares

    def checkpoint_slice(self, param_name: str, shard: str | None) -> tuple[int, int, int] | None:
        if param_name == "input_scale":  # one activation scale feeds every row
            return None
        share = self.shares[self.shard_names.index(shard) if shard else 0]
        return 0, share.start, share.total


class RowParallelLinear(Linear):
    def __init__(self, share: Share, out_features: int, bias: bool = False, reduce_results: bool = True) -> None:
        """share: this rank's input columns (the rows the preceding column-parallel layer made).
        reduce_results=False: forward returns this rank's partial product, the ranks' partials
        summing to the output (the bias is added by the rank holding the first columns only)."""
        super().__init__(share.count, out_features, bias=bias)
        self.share, self.reduce_results = share, reduce_results

    def to_w4a16_shell(self, group_size: int, dtype: torch.dtype) -> None:
        start, count, total = self.share.start, self.share.count, self.share.total
        if isinstance(group_size, int) and group_size > 0 and (start % group_size or count % group_size):
            raise ValueError(f"group_size: this rank's input columns [{start}, {start + count}) of {total} split a "
                             f"group of {group_size} (tensor_parallel_size {total // count}): a row-parallel shard "
                             "must hold whole groups")
        super().to_w4a16_shell(group_size, dtype)

    def checkpoint_slice(self, param_name: str, shard: str | None) -> tuple[int, int, int] | None:
        # bias and per-output-channel scales cover every output: each rank keeps them whole
        per_column = {"weight": 1, "qweight": 2, "scales": self.group_size, "mins": self.group_size}.get(param_name)
        if per_column is None:
            return None
        return 1, self.share.start // per_column, self.share.total // per_column

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [T, share.count] -> [T, out_features], summed over the group unless reduce_results is off."""
        if not self.reduce_results:
            return self.project(x, self.bias if self.share.start == 0 else None)
        y = all_reduce(self.project(x, None))
        return y if self.bias is None else y + self.bias
