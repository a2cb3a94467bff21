"""Shape arithmetic shared by op shape rules (pure Python; -1 is UNK)."""

from __future__ import annotations

from typing import Sequence


def broadcast_dim(a: int, b: int) -> int | None:
    """The broadcast of two dims, or None when they conflict."""
    if a == 1:
        return b
    if b == 1:
        return a
    if a < 0:
        return b if b > 1 else a
    if b < 0:
        return a
    return a if a == b else None


def paddle_broadcast(x: Sequence[int], y: Sequence[int], axis: int = -1) -> tuple[int, ...] | None:
    """Result shape of Paddle's elementwise broadcasting with ``axis`` (None when incompatible).

    ``axis == -1`` aligns trailing dims (NumPy rules); otherwise ``y``'s dims line up with
    ``x``'s starting at ``axis`` (Paddle's legacy rule) and ``x`` must have the higher rank.
    """
    x, y = tuple(x), tuple(y)
    if axis == -1 or len(x) == len(y):
        n = max(len(x), len(y))
        xs, ys = (1,) * (n - len(x)) + x, (1,) * (n - len(y)) + y
    else:
        if len(y) > len(x):
            return None
        if axis < 0:
            axis += len(x)
        # Paddle trims trailing 1s of y that would run past x's rank.
        while len(y) > 0 and axis + len(y) > len(x) and y[-1] == 1:
            y = y[:-1]
        if axis < 0 or axis + len(y) > len(x):
            return None
        xs, ys = x, (1,) * axis + y + (1,) * (len(x) - axis - len(y))
    out = []
    for a, b in zip(xs, ys):
        d = broadcast_dim(a, b)
        if d is None:
            return None
        out.append(d)
    return tuple(out)


def prod(dims: Sequence[int]) -> int:
    """Product of dims; -1 if any is UNK."""
    result = 1
    for d in dims:
        if d < 0:
            return -1
        result *= d
    return result


def dims_equal(a: int, b: int) -> bool:
    """Known dims must agree; UNK agrees with anything."""
    return a < 0 or b < 0 or a == b


def _norm_axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis
