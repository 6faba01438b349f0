"""platform: the KV block size the runtime uses when the caller names none."""
import torch

from ascendtile import platform
from ascendtile.bench.stub_model import stub_loaded
from ascendtile.runtime import LLM


def test_default_block_size_per_device():
    # 128 on NPU (torch_npu's device type is privateuseone without torch_npu imported): vllm-ascend
    # requires it and the attention kernels' 128-key tiles need it; 16 elsewhere.
    assert platform.default_block_size(torch.device("privateuseone")) == 128
    assert platform.default_block_size("cpu") == 16
    assert platform.default_block_size(torch.device("cuda")) == 16


def test_llm_takes_the_platform_block_size(monkeypatch):
    monkeypatch.setattr(platform, "default_block_size", lambda device: 32)
    llm = LLM(stub_loaded(), max_model_len=64, max_num_seqs=2, num_kv_blocks=8)
    assert llm.config.block_size == 32
    assert LLM(stub_loaded(), max_model_len=64, max_num_seqs=2, num_kv_blocks=8, block_size=48).config.block_size == 48
