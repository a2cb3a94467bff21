"""Data layers: the variables a program is fed at run time.

>>> x = data("images", input_size=64 * 64)                 # (-1, 4096)
"""

from __future__ import annotations

import sys
import warnings
from typing import Sequence

from ..ir import callstack, dtypes
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


def _declare(name: str, shape: list[int], dtype, lod_level: int, stop_gradient: bool,
             need_check_feed: bool = True) -> Variable:
    """The data variable ``name``; declaring it again with the same shape, dtype and LoD level
    returns the one already declared (as Paddle does), a different declaration is an error.

    ``need_check_feed`` is Paddle's feed rule: ``fluid.data`` / ``paddle.static.data`` variables
    take only arrays of their declared dtype and shape; Fluid 1.x's ``layers.data`` (and
    ``py_reader`` slots) declare without it, so the fed array decides (``lowering/feeds.py``)."""
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
                            need_check_feed=need_check_feed, is_data=True)


def _dims(shape, what: str) -> list[int]:
    """``shape``'s dims, every unknown one -1: ``None`` and, as in Fluid, any negative dim
    (``[-256, 1]`` declares an unknown first dim); a 0 dim is an error."""
    dims = [-1 if d is None or d < 0 else d for d in _as_list(shape)]
    if any(d == 0 for d in dims):
        raise ValueError(f"{what}: dims must be positive, or negative / None for unknown; got {list(shape)}")
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

    As in Fluid, the declared dtype and non-batch dims are advice (no ``need_check_feed``): a fed
    array of another dtype or shape runs, its shapes re-inferred through the program.

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
    return _declare(name, full, dtype, lod_level, stop_gradient, need_check_feed=False)


@atomic_layer
def static_data(name: str, shape, dtype="float32", lod_level: int = 0) -> Variable:
    """A data variable whose ``shape`` includes the batch dim (``None`` or ``-1`` for unknown):
    Fluid 1.6+'s ``fluid.data`` and Paddle 2's ``paddle.static.data``.

    >>> static_data("x", [None, 13]).shape
    (-1, 13)
    """
    return _declare(name, _dims(shape, f"data {name!r}"), dtype, lod_level, stop_gradient=True)


@atomic_layer
def reader_slot(name: str, shape, dtype="float32", lod_level: int = 0) -> Variable:
    """A ``py_reader`` slot: ``shape`` includes the batch dim, and like Fluid's reader outputs
    it has no ``need_check_feed`` (the fed batch's dtype and shape decide: BERT's readers pad each
    batch to its own longest sequence). Its samples' sizes are advice too: a ``DataFeeder`` (the
    reader's ``decorate_paddle_reader`` / ``set_sample_list_generator``) takes samples of the
    declared rank whatever their sizes, as Fluid 1.5's did (R-CNN declares [-1, 3, max_size,
    max_size] and feeds each image at its own size)."""
    var = _declare(name, _dims(shape, f"data {name!r}"), dtype, lod_level, stop_gradient=True,
                   need_check_feed=False)
    var.samples_any_size = True
    return var


def _user_stacklevel() -> int:
    """The ``stacklevel`` of the user's innermost frame, for a warning raised from here."""
    frame, level = sys._getframe(1), 1
    while frame is not None and callstack._is_internal(frame.f_code.co_filename):
        frame, level = frame.f_back, level + 1
    return level


def as_index_input(var: Variable, layer: str, slot: str = "label") -> Variable:
    """``var`` where ``layer`` reads integer indices (hard labels): a Fluid 1.x ``layers.data``
    variable declared float becomes int64 at build time, with a warning naming the user's line.

    Fluid's executor never compared a fed array with ``layers.data``'s dtype, and its kernels
    read hard labels as int64: language models declared ``dtype='float32'`` labels, fed int64
    ids and ran. A ``need_check_feed`` variable (``fluid.data``) keeps its dtype (Paddle refuses
    both a float hard label and an int feed of it); so does any variable an op computes.
    """
    if (getattr(var, "is_data", False) and not var.need_check_feed and var.dtype is not None
            and dtypes.is_float(var.dtype)):
        old = var.dtype
        var.dtype = "int64"
        where = callstack.where(callstack.user_callstack())
        warnings.warn(f"{layer} at {where}: its {slot} {var.name!r} is declared {old} (fluid.layers.data), but "
                      f"{layer} reads hard labels as int64 indices, as Fluid's kernel did: {var.name!r} is now "
                      "int64 (feed int64 ids; declare dtype='int64' to silence this)", UserWarning,
                      stacklevel=_user_stacklevel())
    return var
