"""Checking and converting one feed value against its data variable (before anything compiles).

Every error is a :class:`~fluidjax.FeedError` naming the variable. NumPy and JAX arrays must
have the declared dtype (a silent cast would hide a bug in the user's pipeline). Python data —
lists, tuples, scalars — is converted to the declared dtype, as Paddle does, when the
conversion keeps the values: floats round to a narrower float type, integers convert to a float
type that holds them exactly, and to an integer type only when every value is integral and in
range. String and object data is refused.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from ..ir.errors import FeedError
from .lod_tensor import LoDTensor, lod_problem
from .lod_value import LoDValue, from_host


def _declared(var) -> str:
    return f"declared {var.dtype} with shape {var.shape}"


def _from_python(name: str, value: Any, want: np.dtype, var) -> np.ndarray:
    try:
        arr = np.asarray(value)
    except Exception as exc:  # ragged lists, objects NumPy cannot make an array of
        raise FeedError(f"feed {name!r}: cannot make an array of the {type(value).__name__} given "
                        f"({type(exc).__name__}: {exc}); the variable is {_declared(var)}") from None
    if arr.dtype == want:
        return arr
    _refuse_kind(name, arr, var)
    if want.kind == "f":
        if arr.dtype.kind in "biu":
            out = arr.astype(want)
            if not np.array_equal(out.astype(arr.dtype), arr):
                raise FeedError(f"feed {name!r}: the integers given do not all fit {want} exactly; the "
                                f"variable is {_declared(var)}")
            return out
        with np.errstate(over="ignore"):
            out = arr.astype(want)
        if not np.array_equal(np.isfinite(out), np.isfinite(arr)):
            raise FeedError(f"feed {name!r}: values overflow {want}; the variable is {_declared(var)}")
        return out
    if want.kind in "iu":
        if arr.dtype.kind == "f" and not np.all(np.isfinite(arr) & (arr == np.round(arr))):
            raise FeedError(f"feed {name!r}: the values given are not all integers, and the variable is "
                            f"{_declared(var)}")
        info = np.iinfo(want)
        if arr.size and (arr.min() < info.min or arr.max() > info.max):
            raise FeedError(f"feed {name!r}: values outside the range of {want}; the variable is "
                            f"{_declared(var)}")
        return arr.astype(want)
    if want.kind == "b":
        if arr.dtype.kind in "iuf" and np.isin(arr, (0, 1)).all():
            return arr.astype(bool)
    raise FeedError(f"feed {name!r}: cannot convert {arr.dtype} data exactly to {want}; the variable is "
                    f"{_declared(var)}")


def _refuse_kind(name: str, arr, var) -> None:
    kind = np.dtype(arr.dtype).kind
    if kind in "OUSV":
        what = {"O": "Python objects", "U": "strings", "S": "bytes", "V": "structured records"}[kind]
        raise FeedError(f"feed {name!r} holds {what} (dtype {arr.dtype}); the variable is {_declared(var)}: "
                        "feed numbers")
    if kind == "c":
        raise FeedError(f"feed {name!r} holds complex numbers; the variable is {_declared(var)}")


def check_feed(name: str, value: Any, want: np.dtype, declared: tuple[int, ...], var) -> Any:
    """``value`` as the array to feed variable ``var`` (named ``name``), or a FeedError."""
    if isinstance(value, LoDTensor):
        value = value.value()
        if value is None:
            raise FeedError(f"feed {name!r} is an empty LoDTensor (it holds no value); the variable is "
                            f"{_declared(var)}")
    if isinstance(value, (np.ndarray, jax.Array)):
        if value.dtype != want:  # a NumPy dtype compare: cheap on the hot path
            _refuse_kind(name, value, var)
            raise FeedError(f"feed {name!r} has dtype {value.dtype}, but the variable is {_declared(var)}; "
                            f"convert it (x.astype({var.dtype!r}))")
    else:
        value = _from_python(name, value, want, var)
    shape = value.shape
    if len(shape) != len(declared) or any(d >= 0 and d != s for d, s in zip(declared, shape)):
        raise FeedError(f"feed {name!r} has shape {tuple(shape)}, but the variable is declared "
                        f"{declared} (-1 takes any size)")
    return value


def _check_offsets(name: str, lod, rows: int) -> None:
    """Paddle's LoD rules (``lod_tensor.lod_problem``), the broken one named."""
    problem = lod_problem(lod, rows)
    if problem is not None:
        raise FeedError(f"feed {name!r}: invalid LoD {lod}: {problem}")


def _fluid_trailing_one(data: np.ndarray, declared: tuple[int, ...]) -> np.ndarray:
    """LoD data whose shape is the declared one with a trailing 1 added or dropped, reshaped to the
    declared rank: Fluid 1.x's ``create_lod_tensor`` of Python lists always makes ``[N, 1]`` rows,
    scripts feed them to ids declared ``[None]`` (``fluid.data``), and Fluid took both spellings."""
    if data.ndim == len(declared) + 1 and data.shape[-1] == 1:
        return data.reshape(data.shape[:-1])
    if data.ndim + 1 == len(declared) and declared[-1] == 1:
        return data.reshape(data.shape + (1,))
    return data


def check_lod_feed(name: str, value: Any, want: np.dtype, declared: tuple[int, ...], var) -> LoDValue:
    """A feed of a ``lod_level > 0`` variable: a LoDTensor with that many levels, as a padded
    :class:`LoDValue` (see ``lod_value.py``)."""
    if not isinstance(value, LoDTensor):
        raise FeedError(f"feed {name!r}: the variable has lod_level {var.lod_level}, so it takes a LoDTensor "
                        f"with {var.lod_level} LoD level(s) (fj.create_lod_tensor(data, lengths)); got "
                        f"{type(value).__name__} without LoD")
    lod = value.lod()
    if len(lod) != var.lod_level:
        raise FeedError(f"feed {name!r}: the variable has lod_level {var.lod_level}, but the LoDTensor has "
                        f"{len(lod)} LoD level(s)")
    data = np.asarray(value.value()) if value.value() is not None else value
    if isinstance(data, np.ndarray) and data.ndim >= 1:
        data = _fluid_trailing_one(data, declared)
    data = check_feed(name, data, want, declared, var)
    _check_offsets(name, lod, data.shape[0])
    return from_host(np.asarray(data), lod)
