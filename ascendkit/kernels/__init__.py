"""@triton.jit kernels and their launchers (grid and tile choice), one file per op family.

Kernel modules are imported lazily (by the ops' launchers and by the lowering gate), so importing
ascendkit needs no triton. The gate discovers every module here, so no kernel can be left out.
"""
import pkgutil

_NOT_KERNELS = {"ascend_gate"}
KERNEL_MODULES = tuple(
    m.name for m in pkgutil.iter_modules(__path__) if m.name not in _NOT_KERNELS and not m.name.startswith("_")
)
