"""Fluid 1.8's tensor-creation layers beyond :mod:`.tensor_layers`: ``linspace``, ``full``, ``randn``,
``eye``, ``nonzero``, ``tensor_array_to_tensor``, ``create_tensor``, ``create_parameter``. Each
appends the op Paddle 2.6 runs for it, with Fluid 1.8's arguments and defaults.

>>> xs = linspace(0.0, 1.0, 5, "float32")        # (5,)
>>> i3 = eye(3, batch_shape=[2])                  # (2, 3, 3)
>>> idx = nonzero(greater_than(x, y))             # (-1, rank) int64 coordinates
"""

from __future__ import annotations

from typing import Sequence

from ..ir import dtypes
from ..ir.variable import Variable
from .layer_helper import LayerHelper
from .param_attr import ParamAttr
from .tensor_layers import _dtype_enum, _random, fill_constant, slice, stack

__all__ = ["linspace", "full", "randn", "eye", "nonzero", "tensor_array_to_tensor", "create_tensor",
           "create_parameter", "uniform_random_batch_size_like", "gaussian_random_batch_size_like", "randperm",
           "sampling_id"]


def linspace(start, stop, num, dtype) -> Variable:
    """``num`` evenly spaced values from ``start`` to ``stop`` (both included): a 1-D Variable of
    ``dtype``. Numbers become ``fill_constant`` ops; a Variable ``num`` leaves the length unknown
    until run time, where it must be a constant."""
    dtype = dtypes.normalize(dtype)
    helper = LayerHelper("linspace")
    start = start if isinstance(start, Variable) else fill_constant([1], dtype, start)
    stop = stop if isinstance(stop, Variable) else fill_constant([1], dtype, stop)
    length = -1 if isinstance(num, Variable) else int(num)
    if length == 0 or length < -1:
        raise ValueError(f"linspace: num must be positive, got {num}")
    num = num if isinstance(num, Variable) else fill_constant([1], "int32", length)
    out = helper.create_tmp(dtype, stop_gradient=True, shape=(length,))
    helper.append_op("linspace", {"Start": start, "Stop": stop, "Num": num}, {"Out": out},
                     {"dtype": _dtype_enum(dtype)})
    return out


def full(shape: Sequence[int], fill_value, out: Variable | None = None, dtype=None, device=None,
         stop_gradient: bool = True, name: str | None = None) -> Variable:
    """A tensor of ``shape`` filled with ``fill_value`` (``dtype`` float32 by default): Fluid 1.8.5's
    preview of ``paddle.full`` (``device`` has no effect: XLA places it)."""
    out = fill_constant(shape, dtype or "float32", fill_value, out=out, name=name)
    out.stop_gradient = bool(stop_gradient)
    return out


def randn(shape: Sequence[int], out: Variable | None = None, dtype=None, device=None, stop_gradient: bool = True,
          name: str | None = None) -> Variable:
    """Standard normal numbers of ``shape`` (float32 or float64), op ``gaussian_random``; they follow
    the program's ``random_seed`` (Fluid drew a seed from NumPy here)."""
    dtype = dtypes.normalize(dtype or "float32")
    if dtype not in ("float32", "float64"):
        raise TypeError(f"randn: dtype must be float32 or float64, got {dtype!r}")
    if out is not None:
        raise NotImplementedError("randn: out= is not supported (use the returned Variable)")
    result = _random("gaussian_random", shape, dtype, {"mean": 0.0, "std": 1.0, "seed": 0}, name, "randn")
    result.stop_gradient = bool(stop_gradient)
    return result


def eye(num_rows: int, num_columns: int | None = None, batch_shape: Sequence[int] | None = None,
        dtype="float32") -> Variable:
    """An identity matrix num_rows × num_columns (op ``eye``), stacked to ``batch_shape`` + that
    shape when given."""
    if not isinstance(num_rows, int) or num_rows < 0:
        raise TypeError(f"eye: num_rows must be a non-negative int, got {num_rows!r}")
    if num_columns is None:
        num_columns = num_rows
    elif not isinstance(num_columns, int) or num_columns < 0:
        raise TypeError(f"eye: num_columns must be a non-negative int, got {num_columns!r}")
    dtype = dtypes.normalize(dtype)
    helper = LayerHelper("eye")
    out = helper.create_tmp(dtype, stop_gradient=True)
    helper.append_op("eye", {}, {"Out": out},
                     {"num_rows": num_rows, "num_columns": num_columns, "dtype": _dtype_enum(dtype)})
    if batch_shape is not None:
        if not isinstance(batch_shape, (list, tuple)):
            raise TypeError("eye: batch_shape must be a list")
        for size in reversed(batch_shape):
            if size <= 0:
                raise ValueError(f"eye: batch_shape sizes must be positive, got {batch_shape}")
            out = stack([out] * int(size), axis=0)
        out.stop_gradient = True
    return out


def nonzero(input: Variable, as_tuple: bool = False):
    """The int64 coordinates [K, rank] of the K non-zero elements of ``input`` (op
    ``where_index``); ``as_tuple`` splits them into one [K, 1] Variable per dim."""
    helper = LayerHelper("where_index")
    coords = helper.create_tmp("int64", stop_gradient=True)
    helper.append_op("where_index", {"Condition": input}, {"Out": coords})
    if not as_tuple:
        return coords
    rank = input.ndim
    if rank == 1:
        return (coords,)
    return tuple(slice(coords, axes=[1], starts=[i], ends=[i + 1]) for i in range(rank))


def tensor_array_to_tensor(input: Variable, axis: int = 1, name: str | None = None, use_stack: bool = False):
    """The elements of the tensor array ``input`` concatenated (or stacked, ``use_stack``) along
    ``axis``, and an int32 Variable of each element's size along ``axis``."""
    helper = LayerHelper("tensor_array_to_tensor", name)
    out = helper.create_tmp(input.dtype)
    index = helper.create_tmp("int32", stop_gradient=True)
    helper.append_op("tensor_array_to_tensor", {"X": input}, {"Out": out, "OutIndex": index},
                     {"axis": int(axis), "use_stack": bool(use_stack)})
    return out, index


def create_tensor(dtype, name: str | None = None, persistable: bool = False) -> Variable:
    """An empty Variable of ``dtype`` in the current block, for an op (``assign``, ``array_read``,
    ...) to write."""
    helper = LayerHelper("create_tensor", name)
    return helper.block.create_var(helper.name, (), dtypes.normalize(dtype), persistable=bool(persistable))


def create_parameter(shape: Sequence[int], dtype, name: str | None = None, attr=None, is_bias: bool = False,
                     default_initializer=None):
    """A parameter of ``shape`` and ``dtype`` (initialised in the startup program: ``attr``'s
    initializer, else ``default_initializer``, else Xavier, or 0 for a bias)."""
    attr = ParamAttr(name=name) if attr is None else ParamAttr.to_attr(attr)
    shape = [int(d) for d in shape]
    return LayerHelper("create_parameter", name).create_parameter(attr, shape, dtypes.normalize(dtype),
                                                                  is_bias=bool(is_bias),
                                                                  default_initializer=default_initializer)


def _batch_size_like(op_type: str, input: Variable, shape, dtype, input_dim_idx: int, output_dim_idx: int,
                     attrs: dict) -> Variable:
    helper = LayerHelper(op_type)
    out = helper.create_tmp(dtypes.normalize(dtype), stop_gradient=True)
    helper.append_op(op_type, {"Input": input}, {"Out": out},
                     {"shape": [int(s) for s in shape], "input_dim_idx": int(input_dim_idx),
                      "output_dim_idx": int(output_dim_idx), "dtype": _dtype_enum(dtype), **attrs})
    return out


def uniform_random_batch_size_like(input: Variable, shape, dtype="float32", input_dim_idx: int = 0,
                                   output_dim_idx: int = 0, min: float = -1.0, max: float = 1.0,  # noqa: A002
                                   seed: int = 0) -> Variable:
    """Uniform numbers in [min, max) of ``shape``, dim ``output_dim_idx`` taken from ``input``'s
    dim ``input_dim_idx`` (the batch size)."""
    return _batch_size_like("uniform_random_batch_size_like", input, shape, dtype, input_dim_idx, output_dim_idx,
                            {"min": float(min), "max": float(max), "seed": int(seed)})


def gaussian_random_batch_size_like(input: Variable, shape, input_dim_idx: int = 0, output_dim_idx: int = 0,
                                    mean: float = 0.0, std: float = 1.0, seed: int = 0, dtype="float32") -> Variable:
    """Normal numbers (``mean``, ``std``) of ``shape``, dim ``output_dim_idx`` taken from ``input``'s
    dim ``input_dim_idx``."""
    return _batch_size_like("gaussian_random_batch_size_like", input, shape, dtype, input_dim_idx, output_dim_idx,
                            {"mean": float(mean), "std": float(std), "seed": int(seed)})


def randperm(n: int, out: Variable | None = None, dtype="int64", device=None, stop_gradient: bool = True,
             seed: int = 0) -> Variable:
    """A random permutation of 0 .. n-1 (``dtype`` int32 or int64). It follows the program's
    ``random_seed``; ``seed`` and ``device`` are taken for Fluid's signature (Paddle 2's op has no
    seed attribute)."""
    if int(n) < 1:
        raise ValueError(f"randperm: n must be positive, got {n}")
    helper = LayerHelper("randperm")
    if out is None:
        out = helper.create_tmp(dtypes.normalize(dtype), stop_gradient=True)
    helper.append_op("randperm", {}, {"Out": out}, {"n": int(n), "dtype": _dtype_enum(dtype)})
    out.stop_gradient = stop_gradient
    return out


def sampling_id(x: Variable, min: float = 0.0, max: float = 1.0, seed: int = 0, dtype="float32") -> Variable:  # noqa: A002
    """One sampled class id per row of the probabilities ``x`` [B, C]: an int64 [B] (Fluid's kernel
    writes int64 whatever ``dtype`` says)."""
    helper = LayerHelper("sampling_id")
    out = helper.create_tmp("int64", stop_gradient=True)
    helper.append_op("sampling_id", {"X": x}, {"Out": out}, {"min": float(min), "max": float(max), "seed": int(seed)})
    return out
