"""ascendkit: kernel-first LLM inference for Huawei Ascend NPUs.

Importing the package registers every op as torch.ops.ascend.*.
"""
from ascendkit import ops  # noqa: F401  (registers torch.ops.ascend.*)

__version__ = "0.1.0"
