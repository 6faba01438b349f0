"""An F32 copy of a GGUF file for `bench e2e --compare llama.cpp-f32`: the same metadata, every
tensor dequantised to float32 with the `gguf` package. Those are the values ascendtile and HF compute
with in fp32 (both dequantise the same way when they load the GGUF), so llama.cpp on this copy does
the same arithmetic on the same bytes, where llama.cpp on the original runs its own quantised
kernels."""
from __future__ import annotations

from pathlib import Path

import numpy as np


def write_f32_gguf(source: Path, target: Path) -> Path:
    """Write `target`: `source` with every tensor as F32 and general.file_type ALL_F32. Reuses an
    existing `target` newer than `source` (the default model's copy is ~0.5 GB and takes seconds)."""
    from gguf import GGUFReader, GGUFValueType, GGUFWriter, LlamaFileType
    from gguf.quants import dequantize

    if target.exists() and target.stat().st_mtime >= source.stat().st_mtime:
        return target
    reader = GGUFReader(source)
    architecture = reader.fields["general.architecture"].contents()
    partial = target.with_suffix(".partial")
    target.parent.mkdir(parents=True, exist_ok=True)
    writer = GGUFWriter(partial, architecture)
    for field in reader.fields.values():
        # GGUF.* are the header's own counts; the writer sets the architecture itself
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        if field.name == "general.file_type":
            writer.add_file_type(LlamaFileType.ALL_F32)
            continue
        kind = GGUFValueType(field.types[0])
        sub_type = GGUFValueType(field.types[-1]) if kind == GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), kind, sub_type)
    for tensor in reader.tensors:
        writer.add_tensor(tensor.name, np.ascontiguousarray(dequantize(tensor.data, tensor.tensor_type), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    partial.replace(target)  # a run killed mid-write never leaves a truncated copy to be reused
    return target
