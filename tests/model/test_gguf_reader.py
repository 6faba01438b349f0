"""ascendtile's GGUF header reader vs the gguf package's GGUFReader (same metadata values, same
tensor table and bytes) on the embedded SmolLM2 file and on a file written here with every
metadata value type; malformed files raise ValueError saying what is wrong."""
import struct

import gguf
import numpy as np
import pytest

from ascendtile.model import default_model_path
from ascendtile.model.loading.gguf_reader import read_gguf


def _same_as_gguf_reader(path: str) -> None:
    metadata, tensors = read_gguf(path)
    reader = gguf.GGUFReader(path)
    expected = {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")}
    assert metadata.keys() == expected.keys()
    for key, value in expected.items():
        assert metadata[key] == value or np.float32(metadata[key]) == np.float32(value), key
    assert [t.name for t in tensors] == [t.name for t in reader.tensors]
    for ours, theirs in zip(tensors, reader.tensors):
        assert ours.tensor_type == theirs.tensor_type and ours.shape == tuple(reversed(theirs.shape.tolist()))
        assert ours.data.dtype == theirs.data.dtype and np.array_equal(ours.data, theirs.data), ours.name


def test_embedded_smollm2_matches_gguf_reader():
    _same_as_gguf_reader(default_model_path())


def _write(path, alignment: int | None = None) -> None:
    writer = gguf.GGUFWriter(str(path), "llama")
    if alignment:
        writer.add_custom_alignment(alignment)
    writer.add_uint8("t.u8", 200)
    writer.add_int8("t.i8", -5)
    writer.add_uint16("t.u16", 60000)
    writer.add_int16("t.i16", -300)
    writer.add_uint32("t.u32", 4_000_000_000)
    writer.add_int32("t.i32", -7)
    writer.add_float32("t.f32", 0.1)
    writer.add_uint64("t.u64", 2 ** 40)
    writer.add_int64("t.i64", -(2 ** 40))
    writer.add_float64("t.f64", 0.1)
    writer.add_bool("t.bool", True)
    writer.add_string("t.str", "héllo ▁ 🎉")
    writer.add_array("t.ints", [1, 2, 3])
    writer.add_array("t.strs", ["a", "", "ü b"])
    rng = np.random.default_rng(0)
    writer.add_tensor("f32", rng.standard_normal((3, 5)).astype(np.float32))
    writer.add_tensor("f16", rng.standard_normal((2, 7)).astype(np.float16))
    q8 = gguf.quants.quantize(rng.standard_normal((4, 64)).astype(np.float32), gguf.GGMLQuantizationType.Q8_0)
    writer.add_tensor("q8", q8, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.mark.parametrize("alignment", [None, 64])
def test_every_value_type_and_alignment(tmp_path, alignment):
    path = tmp_path / "all.gguf"
    _write(path, alignment)
    _same_as_gguf_reader(str(path))
    metadata, tensors = read_gguf(str(path))
    assert metadata["t.strs"] == ["a", "", "ü b"] and metadata["t.u64"] == 2 ** 40 and metadata["t.bool"] is True
    q8 = gguf.quants.dequantize(tensors[2].data, tensors[2].tensor_type)
    assert q8.shape == (4, 64) and tensors[2].data.shape == (4, 2 * 34)


def test_malformed_files(tmp_path):
    path = tmp_path / "all.gguf"
    _write(path)
    good = path.read_bytes()
    cases = {
        "bad magic": (b"GGML" + good[4:], "bad magic"),
        "version 1": (good[:4] + struct.pack("<I", 1) + good[8:], "version 1 is not supported"),
        "cut in the header": (good[:200], None),
        "cut in the tensor data": (good[:-40], "past the end of the file"),  # past the last tensor's padding
    }
    for label, (data, message) in cases.items():
        (tmp_path / "bad.gguf").write_bytes(data)
        with pytest.raises(Exception, match=message) as info:
            read_gguf(str(tmp_path / "bad.gguf"))
        assert isinstance(info.value, (ValueError, struct.error)), label
