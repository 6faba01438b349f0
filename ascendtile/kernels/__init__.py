"""@triton.jit kernels and their launchers (grid and tile choice), one file per op family;
modules whose names start with '_' hold shared @triton.jit helpers.

Kernel modules are imported lazily (by the ops' launchers and by the lowering gate), so importing
ascendtile needs no triton. This package imports nothing of ascendtile but `platform`.
"""
import pkgutil

# The op families: every other layer (ops, references, lowering cases, tests, bench cases) has a
# module of the same name for each.
KERNEL_MODULES = tuple(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))
