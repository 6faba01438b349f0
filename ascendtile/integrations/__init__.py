"""Other engines running on our ops. Each integration imports only the public ops
(`ascendtile.ops`, `torch.ops.ascend.*`), never the model zoo or the runtime."""
