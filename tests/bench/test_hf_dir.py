"""The HF directory `bench e2e --compare vllm` hands vLLM: an up-to-date one is reused, a stale one
rewritten, and a failed rewrite leaves the old directory as it was (the write goes to a partial
directory first). The written contents are checked by tests/integrations/test_vllm_plugin.py (vLLM
loads them) and tests/bench/test_e2e_bench.py (vLLM on them agrees with ours)."""
import os

import pytest

from ascendtile.bench.hf_dir import write_hf_dir


def test_up_to_date_dir_is_reused_and_a_stale_one_rewritten(tmp_path):
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"not a GGUF")  # loading it fails: a rewrite attempt shows as an error
    out = tmp_path / "model.fp32.hf"
    out.mkdir()
    (out / "config.json").write_text("{}")
    os.utime(out / "config.json", (gguf.stat().st_mtime + 10,) * 2)
    assert write_hf_dir(gguf, out) == out  # reused: no load
    os.utime(out / "config.json", (gguf.stat().st_mtime - 10,) * 2)  # older than its GGUF: rewritten
    with pytest.raises(ValueError, match="GGUF magic"):
        write_hf_dir(gguf, out)
    assert (out / "config.json").read_text() == "{}"
    assert not (tmp_path / "model.fp32.hf.partial").exists()
