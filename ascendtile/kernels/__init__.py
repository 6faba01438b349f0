"""@triton.jit kernels and their launchers (grid and tile choice), one file per op family;
modules whose names start with '_' hold shared @triton.jit helpers, and _interpreter.py a fix to
the Triton interpreter's speed that this package installs under TRITON_INTERPRET=1.

Kernel modules are imported lazily (by the ops' launchers and by the lowering gate), so importing
ascendtile needs no triton. This package imports nothing of ascendtile but `platform`.
"""
import os
import pkgutil

# The op families: every other layer (ops, references, lowering cases, tests, bench cases) has a
# module of the same name for each.
KERNEL_MODULES = tuple(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))

if os.environ.get("TRITON_INTERPRET", "0") == "1":
    from ascendtile.kernels._interpreter import patch_interpreter

    patch_interpreter()
