"""Data layers: the variables a program is fed at run time.

>>> x = data("images", input_size=64 * 64)                 # (-1, 4096)
"""

from __future__ import annotations

from typing import Sequence

from ..ir.program import default_main_program
from ..ir.variable import Variable

__all__ = ["data"]


def _as_list(value) -> list[int]:
    if value is None:
        return []
    if isinstance(value, int):
        return [value]
    return [int(v) for v in value]


def data(name: str, input_size=None, dims=None, *, shape: Sequence[int] | None = None, dtype="float32",
         lod_level: int = 0, stop_gradient: bool = True) -> Variable:
    """A data variable fed at run time: the per-example shape with the batch dim -1 in front.

    ``input_size`` / ``dims`` give the feature size (int or list), ``shape`` a full per-example
    shape. With ``lod_level`` > 0 the first dim counts the innermost elements of all sequences.

    >>> data("images", input_size=64 * 64).shape
    (-1, 4096)
    """
    given = [a for a in (input_size, dims, shape) if a is not None]
    if len(given) > 1:
        raise ValueError("give one of input_size, dims and shape")
    per_example = _as_list(given[0]) if given else []
    if any(d < -1 or d == 0 for d in per_example):
        raise ValueError(f"data {name!r}: per-example dims must be positive (or -1), got {per_example}")
    block = default_main_program().global_block()
    if block.has_var(name):
        raise ValueError(f"a variable named {name!r} already exists in the program")
    return block.create_var(name, (-1, *per_example), dtype, lod_level, stop_gradient=stop_gradient,
                            need_check_feed=True, is_data=True)
