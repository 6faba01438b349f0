"""The F32 copy `bench e2e --compare llama.cpp-f32` runs llama.cpp on: every tensor holds exactly
the values the gguf package dequantises the original to (what ascendtile and HF load), every
metadata field is carried over (file_type says ALL_F32), and an up-to-date copy is reused."""
import os

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf.quants import dequantize, quantize  # noqa: E402

from ascendtile.bench.f32_gguf import write_f32_gguf  # noqa: E402


def _quantised_file(path) -> dict[str, np.ndarray]:
    """A small GGUF with Q4_1, Q8_0 and F32 tensors (odd row counts) and every kind of metadata
    value; returns the source tensors' dequantised values by name."""
    rng = np.random.default_rng(0)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(2)
    writer.add_rope_freq_base(10000.0)
    writer.add_bool("tokenizer.ggml.add_bos_token", False)
    writer.add_token_list(["a", "b", "<s>"])
    writer.add_token_types([1, 1, 3])
    writer.add_chat_template("{{ messages }}")
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_1)
    expected = {}
    for name, qtype, shape in (("token_embd.weight", gguf.GGMLQuantizationType.Q4_1, (7, 64)),
                               ("blk.0.attn_q.weight", gguf.GGMLQuantizationType.Q8_0, (5, 96)),
                               ("output_norm.weight", gguf.GGMLQuantizationType.F32, (64,))):
        values = rng.standard_normal(shape).astype(np.float32)
        data = values if qtype == gguf.GGMLQuantizationType.F32 else quantize(values, qtype)
        writer.add_tensor(name, data, raw_dtype=qtype if data is not values else None)
        expected[name] = dequantize(data, qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return expected


def _fields(reader) -> dict:
    return {f.name: f.contents() for f in reader.fields.values() if not f.name.startswith("GGUF.")}


def test_f32_copy_holds_the_dequantised_values_and_all_metadata(tmp_path):
    source = tmp_path / "tiny.gguf"
    expected = _quantised_file(source)
    target = write_f32_gguf(source, tmp_path / "out" / "tiny.F32.gguf")
    original, copy = gguf.GGUFReader(source), gguf.GGUFReader(target)
    assert [t.name for t in copy.tensors] == [t.name for t in original.tensors]
    for tensor in copy.tensors:
        assert tensor.tensor_type == gguf.GGMLQuantizationType.F32, tensor.name
        np.testing.assert_array_equal(np.asarray(tensor.data).reshape(expected[tensor.name].shape),
                                      expected[tensor.name], err_msg=tensor.name)
    want = _fields(original)
    assert want.pop("general.file_type") == gguf.LlamaFileType.MOSTLY_Q4_1
    got = _fields(copy)
    assert got.pop("general.file_type") == gguf.LlamaFileType.ALL_F32
    assert got == want
    assert not list((tmp_path / "out").glob("*.partial"))


def test_up_to_date_copy_is_reused_and_a_stale_one_rewritten(tmp_path):
    source = tmp_path / "tiny.gguf"
    _quantised_file(source)
    target = write_f32_gguf(source, tmp_path / "tiny.F32.gguf")
    target.write_bytes(b"marker")  # a reused copy keeps these bytes
    os.utime(target, (source.stat().st_mtime + 10,) * 2)
    assert write_f32_gguf(source, target).read_bytes() == b"marker"
    os.utime(target, (source.stat().st_mtime - 10,) * 2)  # older than its source: rewritten
    assert gguf.GGUFReader(write_f32_gguf(source, target)).tensors[0].tensor_type == gguf.GGMLQuantizationType.F32
