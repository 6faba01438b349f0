"""torch.ops.ascend.* registration (importing this package registers every op) and functional
wrappers that allocate outputs: `ascendkit.ops.rms_norm(x, w, eps)` etc."""
from ascendkit.ops._registry import REGISTERED, kernel_path
from ascendkit.ops.activation import silu_and_mul
from ascendkit.ops.norm import fused_add_rms_norm, rms_norm

__all__ = ["REGISTERED", "kernel_path", "rms_norm", "fused_add_rms_norm", "silu_and_mul"]
