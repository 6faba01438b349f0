"""platform: the KV block size the runtime uses when the caller names none; the CPU ISA report."""
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


def test_isa_names_the_extensions_that_decide_cpu_speed():
    avx512_bf16 = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 avx512_vnni sse4_2\n"
    assert platform.isa_from_cpuinfo(avx512_bf16) == "avx2 + avx512f + avx512_bf16 + avx512_vnni"
    assert platform.isa_from_cpuinfo("flags\t\t: fpu avx2 fma f16c\n") == "avx2"
    assert platform.isa_from_cpuinfo("Features\t: fp asimd\n") == "none"  # aarch64 names no flags line
    assert platform.cpu_isa() != "" and ("CPU ISA", platform.cpu_isa()) in platform.report()


def test_vendor_is_read_from_cpuinfo():
    assert platform.vendor_from_cpuinfo("processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: avx2\n") == "AuthenticAMD"
    assert platform.vendor_from_cpuinfo("vendor_id\t: GenuineIntel\n") == "GenuineIntel"
    assert platform.vendor_from_cpuinfo("Features\t: fp asimd\n") == "unknown"  # aarch64 names no vendor_id
    assert ("CPU vendor", platform.cpu_vendor()) in platform.report()
