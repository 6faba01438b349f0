"""Input checks shared by every op. Each raises TypeError (wrong kind or dtype) or ValueError
(wrong shape, device, layout) with a message that starts with the argument's name."""
from __future__ import annotations

from typing import Iterable, Sequence

import torch

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
INDEX_DTYPES = (torch.int32, torch.int64)
INT8, INT32, INT64, FP32, BOOL = (torch.int8,), (torch.int32,), (torch.int64,), (torch.float32,), (torch.bool,)


def _dtype_names(dtypes: Iterable[torch.dtype]) -> str:
    return ", ".join(str(d).replace("torch.", "") for d in dtypes)


def check_tensor(
    name: str,
    t,
    *,
    dtypes: Sequence[torch.dtype] | None = None,
    ndim: int | Sequence[int] | None = None,
    last_dim_contiguous: bool = True,
    contiguous: bool = False,
) -> None:
    """`t` is a tensor of one of `dtypes`, with `ndim` dims, unit stride in its last dim."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if dtypes is not None and t.dtype not in dtypes:
        raise TypeError(f"{name}: dtype {str(t.dtype).replace('torch.', '')} not supported; expected one of {_dtype_names(dtypes)}")
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if t.dim() not in allowed:
            raise ValueError(f"{name}: expected {' or '.join(map(str, allowed))} dims, got shape {tuple(t.shape)}")
    if contiguous and not t.is_contiguous():
        raise ValueError(f"{name}: must be contiguous (strides {t.stride()})")
    # stride first: a unit stride settles it without reading the size, which under torch.compile
    # would guard on a dynamic token count (and recompile when it is 1)
    if last_dim_contiguous and t.dim() > 0 and t.stride(-1) != 1 and t.shape[-1] > 1:
        raise ValueError(f"{name}: last dim must be contiguous (stride 1), got strides {t.stride()}")


def check_same_device(**tensors: torch.Tensor | None) -> None:
    """All given tensors live on the first one's device."""
    items = [(k, v) for k, v in tensors.items() if v is not None]
    first_name, first = items[0]
    for name, t in items[1:]:
        if t.device != first.device:
            raise ValueError(f"{name}: on {t.device}, but {first_name} is on {first.device}")


def check_same_dtype(**tensors: torch.Tensor) -> None:
    items = list(tensors.items())
    first_name, first = items[0]
    for name, t in items[1:]:
        if t.dtype != first.dtype:
            raise TypeError(f"{name}: dtype {t.dtype} differs from {first_name} dtype {first.dtype}")


def check_shape(name: str, t: torch.Tensor, expected: Sequence[int], what: str = "") -> None:
    if tuple(t.shape) != tuple(expected):
        hint = f" ({what})" if what else ""
        raise ValueError(f"{name}: expected shape {tuple(expected)}{hint}, got {tuple(t.shape)}")


def check_rows_viewable(name: str, t: torch.Tensor) -> None:
    """Leading dims must collapse into one row stride, so the kernel sees a [rows, hidden] view."""
    if t.dim() > 2:
        try:
            t.view(-1, t.shape[-1])
        except RuntimeError:
            raise ValueError(f"{name}: leading dims {tuple(t.shape[:-1])} with strides {t.stride()[:-1]} cannot be viewed as rows") from None


def check_positive(name: str, value: float) -> None:
    if not value > 0:
        raise ValueError(f"{name}: must be > 0, got {value}")


def check_numel(name: str, t: torch.Tensor, allowed: tuple[int, ...], what: str) -> None:
    if t.numel() not in allowed:
        raise ValueError(f"{name}: expected {what} ({' or '.join(map(str, sorted(set(allowed))))} elements), got shape {tuple(t.shape)}")


def check_nonempty_rows(name: str, t: torch.Tensor) -> None:
    """The last dim (the row an int8 op quantizes) holds at least one element."""
    if t.shape[-1] == 0:
        raise ValueError(f"{name}: last dim (the quantized row) must not be empty, got shape {tuple(t.shape)}")


def check_vector(name: str, t: torch.Tensor, length: int, dtypes: tuple, what: str) -> None:
    """A contiguous 1-D tensor of `length` elements of one of dtypes (`what` says what the length
    counts, e.g. "one per row")."""
    check_tensor(name, t, dtypes=dtypes, ndim=1, contiguous=True)
    check_shape(name, t, (length,), what)
