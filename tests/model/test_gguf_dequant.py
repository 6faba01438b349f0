"""The loader's torch dequantization (ascendtile/model/loading/gguf_dequant.py) against gguf's own
numpy code, bit for bit: random bytes (NaN and inf scales included), odd row counts,
rows of several blocks, a strided view; the embedded SmolLM2's stored tensors; types it leaves to
gguf; bad data named."""
import gguf
import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from ascendtile.model import default_model_path
from ascendtile.model.loading.gguf_dequant import dequantize
from ascendtile.model.loading.gguf_reader import read_gguf

TORCH_TYPES = [GGMLQuantizationType.Q4_0, GGMLQuantizationType.Q4_1, GGMLQuantizationType.Q5_0,
               GGMLQuantizationType.Q5_1, GGMLQuantizationType.Q8_0]


def _assert_bit_equal(ours: np.ndarray, theirs: np.ndarray) -> None:
    """Same shape, float32, NaN where theirs is NaN (its sign and payload aside) and the same bits
    everywhere else (-0.0 is not 0.0)."""
    assert ours.dtype == theirs.dtype == np.float32 and ours.shape == theirs.shape
    nan = np.isnan(theirs)
    np.testing.assert_array_equal(np.isnan(ours), nan)
    np.testing.assert_array_equal(np.ascontiguousarray(ours).view(np.uint32)[~nan],
                                  np.ascontiguousarray(theirs).view(np.uint32)[~nan])


@pytest.mark.parametrize("qtype", TORCH_TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("rows", [(1,), (7,), (3, 5)], ids=str)
def test_random_blocks_are_bit_equal_to_gguf(qtype, rows):
    _, block_bytes = GGML_QUANT_SIZES[qtype]
    data = np.random.default_rng(len(rows) * 100 + qtype).integers(0, 256, (*rows, 3 * block_bytes), dtype=np.uint8)
    data[..., 0:2] = np.frombuffer(np.float16(np.nan).tobytes(), np.uint8)  # every row's first block: a NaN scale
    data[..., block_bytes: block_bytes + 2] = np.frombuffer(np.float16(np.inf).tobytes(), np.uint8)  # second: inf
    with np.errstate(invalid="ignore"):  # gguf's inf * 0
        ours, theirs = dequantize(data, qtype), gguf.quants.dequantize(data, qtype)
    assert ours.shape == theirs.shape == (*rows, 96)
    assert np.isnan(theirs).any() and np.isinf(theirs).any()
    _assert_bit_equal(ours, theirs)


def test_a_strided_view_is_read_as_its_elements():
    qtype = GGMLQuantizationType.Q5_0
    _, block_bytes = GGML_QUANT_SIZES[qtype]
    data = np.random.default_rng(1).integers(0, 256, (6, 4 * block_bytes), dtype=np.uint8)
    view = data[::2, block_bytes: 3 * block_bytes]  # every other row, the middle two blocks
    _assert_bit_equal(dequantize(view, qtype), gguf.quants.dequantize(view.copy(), qtype))


def test_embedded_smollm2_tensors_are_bit_equal_to_gguf():
    """Every stored type of the embedded file (Q4_1 layers, the Q8_0 embedding, F32 norms)."""
    _, tensors = read_gguf(default_model_path())
    seen = set()
    for tensor in tensors:
        if tensor.tensor_type in seen:
            continue
        seen.add(tensor.tensor_type)
        _assert_bit_equal(tensor.dequantize(), gguf.quants.dequantize(tensor.data, tensor.tensor_type))
    assert seen == {GGMLQuantizationType.Q4_1, GGMLQuantizationType.Q8_0, GGMLQuantizationType.F32}


def test_other_types_go_to_gguf():
    q6_k = GGMLQuantizationType.Q6_K
    data = np.random.default_rng(2).integers(0, 256, (2, GGML_QUANT_SIZES[q6_k][1]), dtype=np.uint8)
    _assert_bit_equal(dequantize(data, q6_k), gguf.quants.dequantize(data, q6_k))


@pytest.mark.parametrize("data, match", [
    (np.zeros((2, 35), np.uint8), r"^Q8_0 data must be uint8 rows of whole 34-byte blocks, got uint8 \(2, 35\)$"),
    (np.zeros((2, 34), np.int8), r"^Q8_0 data must be uint8 rows of whole 34-byte blocks, got int8 \(2, 34\)$"),
], ids=["partial_block", "not_bytes"])
def test_bad_data_is_refused(data, match):
    with pytest.raises(ValueError, match=match):
        dequantize(data, GGMLQuantizationType.Q8_0)
