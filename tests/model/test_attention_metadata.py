"""AttentionMetadata.validate: one check of a step's batch description (what the paged ops would
check in every layer), naming the bad field; a validated step lets the layers skip those checks
while the registered ops keep checking direct callers."""
import pytest
import torch

import ascendtile.ops as ak
from ascendtile.model import AttentionMetadata

BLOCK = 16
NUM_BLOCKS = 6  # the table below uses block ids up to 5


def _decode_meta(**changes) -> tuple[torch.Tensor, AttentionMetadata]:
    """Two decode sequences (5 and 17 keys) over blocks of 16, with `changes` applied."""
    fields = dict(positions=torch.tensor([4, 16]), slot_mapping=torch.tensor([16 * 3 + 4, 16 * 5 + 0]),
                  block_tables=torch.tensor([[3, -1], [2, 5]], dtype=torch.int32),
                  cu_seqlens_q=torch.tensor([0, 1, 2], dtype=torch.int32),
                  seqused_k=torch.tensor([5, 17], dtype=torch.int32), max_seqlen_q=1, max_seqlen_k=17)
    fields.update(changes)
    positions = fields.pop("positions")
    return positions, AttentionMetadata(**fields)


def test_valid_step_is_marked_validated():
    positions, meta = _decode_meta()
    assert not meta.validated
    meta.validate(positions, BLOCK, NUM_BLOCKS)
    assert meta.validated


@pytest.mark.parametrize("field, value", [
    ("slot_mapping", torch.tensor([1.0, 2.0])),
    ("slot_mapping", torch.tensor([1, 2, 3])),
    ("block_tables", torch.tensor([[3, -1], [2, 5]], dtype=torch.int64)),
    ("seqused_k", torch.tensor([5, 40], dtype=torch.int32)),  # beyond the 2-block table's 32 slots
    ("cu_seqlens_q", torch.tensor([0, 2], dtype=torch.int32)),
    ("max_seqlen_k", 33),
    ("positions", torch.tensor([[4, 16]])),
])
def test_bad_field_is_named(field, value):
    positions, meta = _decode_meta(**{field: value})
    with pytest.raises((ValueError, TypeError), match=field):
        meta.validate(positions, BLOCK, NUM_BLOCKS)
    assert not meta.validated


def test_unvalidated_wrappers_compute_the_same_and_registered_ops_still_check():
    x, w = torch.randn(4, 64), torch.randn(64)
    torch.testing.assert_close(ak.rms_norm(x, w, 1e-5, validate=False), ak.rms_norm(x, w, 1e-5), rtol=0, atol=0)
    gate_up = torch.randn(4, 128)
    torch.testing.assert_close(ak.silu_and_mul(gate_up, validate=False), ak.silu_and_mul(gate_up), rtol=0, atol=0)
    with pytest.raises(ValueError, match="weight"):  # the op and its default wrapper still validate every call
        torch.ops.ascend.rms_norm(torch.empty_like(x), x, torch.randn(32), 1e-5)
    with pytest.raises(ValueError, match="weight"):
        ak.rms_norm(x, torch.randn(32), 1e-5)
