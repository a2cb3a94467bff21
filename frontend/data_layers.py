"""Data layers: the variables a program is fed at run time.

>>> x = data("images", input_size=64 * 64)                 # (-1, 4096)
"""

from __future__ import annotations

from typing import Sequence

from ..ir import dtypes
from ..ir.errors import NotOfferedError
from ..ir.program import default_main_program
from ..ir.variable import Variable
from .layer_helper import atomic_layer

__all__ = ["data"]


def _as_list(value) -> list[int]:
    if value is None:
        return []
    if isinstance(value, int):
        return [value]
    return [None if v is None else int(v) for v in value]


def _declare(name: str, shape: list[int], dtype, lod_level: int, stop_gradient: bool) -> Variable:
    """The data variable ``name``; declaring it again with the same shape, dtype and LoD level
    returns the one already declared (as Paddle does), a different declaration is an error."""
    block = default_main_program().global_block()
    if block.has_var(name):
        old = block.var(name)
        new = (tuple(shape), dtypes.normalize(dtype), int(lod_level))
        if (tuple(old.shape), old.dtype, old.lod_level) != new or not getattr(old, "is_data", False):
            raise ValueError(f"a variable named {name!r} already exists in the program as "
                             f"{'data' if getattr(old, 'is_data', False) else 'a non-data variable'} of shape "
                             f"{old.shape}, dtype {old.dtype}, lod_level {old.lod_level}; declared again as "
                             f"shape {new[0]}, dtype {new[1]}, lod_level {new[2]}")
        return old
    return block.create_var(name, tuple(shape), dtype, lod_level, stop_gradient=stop_gradient,
                            need_check_feed=True, is_data=True)


def _dims(shape, what: str) -> list[int]:
    dims = [-1 if d is None else d for d in _as_list(shape)]
    if any(d < -1 or d == 0 for d in dims):
        raise ValueError(f"{what}: dims must be positive, or -1 / None for unknown; got {list(shape)}")
    return dims


def data(name: str, shape=None, append_batch_size: bool = True, dtype="float32", lod_level: int = 0,
         type=None, stop_gradient: bool = True, *, input_size=None, dims=None) -> Variable:  # noqa: A002
    """A data variable fed at run time (Fluid 1.x's ``layers.data``).

    ``shape`` is the per-example shape: the batch dim ``-1`` goes in front, unless
    ``append_batch_size=False`` or a dim of ``shape`` is already unknown (``None`` or ``-1``),
    which Fluid takes as a shape that has its batch dim. The seeds' ``input_size=`` / ``dims=``
    (an int or a list) are per-example shapes too. With ``lod_level`` > 0 the first dim counts
    the innermost elements of all sequences. ``type`` is accepted for Fluid's signature (only
    LoD tensors are fed). Declaring the same data variable again returns it.

    >>> data("images", input_size=64 * 64).shape
    (-1, 4096)
    >>> data("label", shape=[1], dtype="int64").shape
    (-1, 1)
    """
    given = [a for a in (input_size, dims, shape) if a is not None]
    if len(given) > 1:
        raise ValueError("give one of input_size, dims and shape")
    if type is not None and type not in (dtypes.LOD_TENSOR, "lod_tensor"):
        raise NotOfferedError(f"data {name!r}: type={type!r}; only LoD tensors (VarType.LOD_TENSOR) are fed")
    per_example = _dims(given[0], f"data {name!r}") if given else []
    has_batch = shape is not None and any(d == -1 for d in per_example)
    full = per_example if has_batch or not append_batch_size else [-1, *per_example]
    return _declare(name, full, dtype, lod_level, stop_gradient)


@atomic_layer
def static_data(name: str, shape, dtype="float32", lod_level: int = 0) -> Variable:
    """A data variable whose ``shape`` includes the batch dim (``None`` or ``-1`` for unknown):
    Fluid 1.6+'s ``fluid.data`` and Paddle 2's ``paddle.static.data``.

    >>> static_data("x", [None, 13]).shape
    (-1, 13)
    """
    return _declare(name, _dims(shape, f"data {name!r}"), dtype, lod_level, stop_gradient=True)
