"""Tiles masked only when they can be partial: @triton.jit load/store helpers, and the host's
choice of a chunk width that divides the row.

A mask the compiler cannot prove all-true costs extra syncs per copy on Ascend (the gated
activations: 28 -> 24 sync flags per kernel without it), so kernels pass a constexpr MASKED that
is False when the tile width divides the row and no row of the tile can be missing.
"""
import triton
import triton.language as tl

MIN_CHUNK = 512  # narrower chunks would cost more per-iteration overhead than a masked tail


def chunk_for(hidden: int, largest: int, smallest: int = MIN_CHUNK) -> int:
    """The widest power-of-two chunk in [smallest, largest] that divides the row, so no chunk is
    masked (7168 = 7 x 1024, 14336 = 7 x 2048); `largest` (masked tail) when none does."""
    chunk = largest
    while chunk >= smallest:
        if hidden % chunk == 0:
            return chunk
        chunk //= 2
    return largest


@triton.jit
def load_tile(ptrs, mask, MASKED: tl.constexpr):
    if MASKED:
        return tl.load(ptrs, mask=mask, other=0.0)
    return tl.load(ptrs)


@triton.jit
def store_tile(ptrs, value, mask, MASKED: tl.constexpr):
    if MASKED:
        tl.store(ptrs, value, mask=mask)
    else:
        tl.store(ptrs, value)
