"""Under TRITON_INTERPRET=1: the Triton 3.2 interpreter patches triton.language's builtins for
itself once per set of language modules, not on every call.

The interpreter runs `_patch_lang(fn)` at every kernel launch and at every call of a @triton.jit
helper from inside a kernel. Each run walks `inspect.getmembers` over triton.language, its core,
tensor and math modules (~0.4 ms) to replace builtins with interpreter versions. The replacements
are global and permanent (nothing undoes them) and a replaced builtin is not replaced again, so
every run after the first for the same modules changes nothing; but helpers called per tile in a
loop made these runs 46 of 85 s of the rms_norm token-count tests (profiled, 2026-11-27).

`patch_interpreter` wraps `_patch_lang` so that it runs again only for language modules it has
not patched yet, or after a new module was imported (an import may add builtins to
triton.language, which the next run then patches, as before). Only for triton 3.2 (triton-ascend's
version): later interpreters undo their patches after each launch (triton 3.9, in vLLM's venv,
returns a scope to undo), so a run there is never redundant.
"""
from __future__ import annotations

import sys
from typing import Callable


def patch_interpreter() -> None:
    """Install the memoised `_patch_lang` in triton 3.2's interpreter; nothing on other versions or
    when it is installed already."""
    import triton
    import triton.language as tl
    from triton.runtime import interpreter

    patch = interpreter._patch_lang
    if not triton.__version__.startswith("3.2.") or getattr(patch, "patches_once", False):
        return
    done: set[tuple[frozenset[int], int]] = set()

    def patch_lang(fn: Callable) -> None:
        langs = frozenset(id(value) for value in fn.__globals__.values() if value is tl or value is tl.core)
        key = (langs, len(sys.modules))
        if key not in done:
            patch(fn)
            done.add(key)

    patch_lang.patches_once = True
    interpreter._patch_lang = patch_lang
