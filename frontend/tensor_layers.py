"""Tensor layer functions: reshaping, joining, slicing, gathering, casting, filling, random tensors.

Names and parameters follow Paddle's ``fluid.layers``; the ops they emit are Paddle 2.6's
(``reshape2``, ``transpose2``, ``flatten_contiguous_range``, ``expand_v2``, ``one_hot_v2``,
``fill_any_like``, ...) with the slots and attributes Paddle's own Python API writes, so Paddle
runs (and differentiates) the programs. ``flatten``, ``expand`` and ``one_hot`` have Paddle 2
semantics (see their docstrings).

Shapes, indices and bounds are Python ints: XLA compiles static shapes, so the tensor forms
Paddle also accepts (a Variable as ``shape``, ``starts``, ``repeat_times`` ...) raise a clear
error here.

>>> x = data("x", dims=[3, 4])                 # (-1, 3, 4)
>>> y = reshape(x, [0, 12])                    # (-1, 12)
>>> a, b = split(y, [4, -1], dim=1)            # (-1, 4), (-1, 8)
>>> z = concat([b, a], axis=1)                 # (-1, 12)
"""

from __future__ import annotations

import builtins
from typing import Sequence

import numpy as np

from ..ir import dtypes
from ..ir.errors import ShapeError
from ..ir.variable import Variable
from .initializer import fill_constant_attrs
from .layer_helper import LayerHelper, atomic_layer
from .layer_args import activate, shape_arguments

__all__ = [
    "fill_constant",
    # shapes and layout
    "reshape", "transpose", "flatten", "squeeze", "unsqueeze", "expand", "broadcast_to", "tile",
    # joining and splitting
    "concat", "split", "stack", "unstack",
    # slicing and indexing
    "slice", "strided_slice", "gather", "gather_nd", "scatter",
    # conversion and metadata
    "cast", "assign", "shape", "range", "arange", "one_hot",
    # creation
    "fill_constant_batch_size_like", "zeros_like", "ones_like", "full_like", "zeros", "ones",
    "uniform_random", "gaussian_random", "randint",
    # padding
    "pad", "pad3d",
]


def fill_constant(shape: Sequence[int], dtype, value, force_cpu: bool = False, out: Variable | None = None,
                  name: str | None = None) -> Variable:
    """A tensor of ``shape`` filled with ``value`` (Fluid 1.8's arguments; ``force_cpu`` has no
    effect: XLA places it)."""
    helper = LayerHelper("fill_constant", name)
    dtype = dtypes.normalize(dtype)
    out = out if out is not None else helper.create_tmp(dtype, stop_gradient=True)
    shape, shape_inputs = shape_arguments(shape, "fill_constant", helper)
    helper.append_op("fill_constant", inputs=shape_inputs, outputs={"Out": out},
                     attrs=fill_constant_attrs(shape, dtype, value))
    return out


# -- helpers -------------------------------------------------------------------------------------
def _ints(value, what: str, layer: str) -> list[int]:
    """A Python int or a sequence of Python ints (a Variable is refused with a clear message)."""
    if isinstance(value, Variable) or (isinstance(value, (list, tuple))
                                       and any(isinstance(v, Variable) for v in value)):
        raise TypeError(
            f"{layer}: {what} must be Python ints; a Variable's value is only known at run time, but XLA "
            "compiles static shapes")
    if isinstance(value, (int, np.integer)):
        return [int(value)]
    return [int(v) for v in value]


def _axis(axis: int, rank: int, layer: str) -> int:
    """``axis`` in [0, rank) (Paddle's kernels expect non-negative axes)."""
    a = axis + rank if axis < 0 else axis
    if not 0 <= a < builtins.max(rank, 1):
        raise ShapeError(f"{layer}: axis {axis} is out of range for a Variable of rank {rank}")
    return a


def _xshape_op(helper: LayerHelper, op_type: str, inputs: dict, attrs: dict, x: Variable) -> Variable:
    """Append an op with Paddle's ``XShape`` side output; return Out."""
    out = helper.create_tmp(x.dtype)
    xshape = helper.create_tmp(x.dtype, stop_gradient=True)
    helper.append_op(op_type, inputs, {"Out": out, "XShape": xshape}, attrs)
    return out


def _dtype_enum(dtype) -> int:
    return dtypes.to_enum(dtypes.normalize(dtype))


# -- shapes and layout -----------------------------------------------------------------------------
def reshape(x: Variable, shape: Sequence[int], actual_shape=None, activation=None, inplace: bool = False,
            name: str | None = None) -> Variable:
    """``x`` with a new shape (``reshape2``): a 0 copies x's dim at that index, one -1 is inferred.

    An incompatible shape is a :class:`ShapeError` when the layer is called. ``actual_shape``
    (Fluid 1.x: an int Variable, the op's ``Shape`` input) is the shape at run time and wins over
    ``shape``, which stays the build-time shape of the result; its values must be known when the
    step is traced (an ``assign`` of constants, shapes and arithmetic on them), else the build-time
    shape is used where it leaves at most one dim unknown (``lowering/ops/reshaping.py``).
    ``inplace`` is accepted for Paddle's signature and has no effect.

    >>> reshape(x, [0, -1])          # x (-1, 3, 4) -> (-1, 12)
    """
    if actual_shape is not None and not isinstance(actual_shape, Variable):
        raise TypeError(f"reshape: actual_shape must be a Variable (an int tensor holding the shape) or None, "
                        f"got {type(actual_shape).__name__}")
    helper = LayerHelper("reshape2", name)
    shape, shape_inputs = shape_arguments(shape, "reshape", helper, tensor_slot="Shape", list_slot="ShapeTensor")
    if actual_shape is None:
        out = _xshape_op(helper, "reshape2", {"X": x, "Shape": [], "ShapeTensor": [], **shape_inputs},
                         {"shape": shape}, x)
        return activate(out, activation, helper)
    _, run_inputs = shape_arguments(actual_shape, "reshape", helper, tensor_slot="Shape", list_slot="ShapeTensor")
    out = helper.create_tmp(x.dtype, shape=_compile_shape(x.shape, shape))
    xshape = helper.create_tmp(x.dtype, stop_gradient=True)
    helper.append_op("reshape2", {"X": x, "Shape": run_inputs["Shape"], "ShapeTensor": []},
                     {"Out": out, "XShape": xshape}, {"shape": shape})
    return activate(out, activation, helper)


def _compile_shape(in_shape, shape) -> tuple:
    """The build-time shape ``shape`` gives ``in_shape`` (0 copies, one -1 inferred when the other
    sizes are known, else left -1): the declared result of a reshape whose run-time shape is a
    tensor (Fluid 1.x's ``actual_shape``)."""
    out = [in_shape[i] if d == 0 and i < len(in_shape) else int(d) for i, d in enumerate(shape)]
    if out.count(-1) == 1 and all(d >= 0 for d in in_shape):
        known = int(np.prod([d for d in out if d != -1]))
        if known > 0 and int(np.prod(in_shape)) % known == 0:
            out[out.index(-1)] = int(np.prod(in_shape)) // known
    return tuple(out)


def transpose(x: Variable, perm: Sequence[int], name: str | None = None) -> Variable:
    """``x`` with its dims permuted (``transpose2``): ``out.shape[i] = x.shape[perm[i]]``."""
    perm = _ints(perm, "perm", "transpose")
    if len(perm) != x.ndim:
        raise ShapeError(f"transpose: perm {perm} must name each of the {x.ndim} dims of {x.name!r} {x.shape}")
    helper = LayerHelper("transpose", name)
    return _xshape_op(helper, "transpose2", {"X": x}, {"axis": perm}, x)


def flatten(x: Variable, start_axis: int | None = None, stop_axis: int | None = None, name: str | None = None, *,
            axis: int | None = None) -> Variable:
    """``x`` with dims ``start_axis`` … ``stop_axis`` merged into one (Paddle 2's ``flatten``,
    op ``flatten_contiguous_range``; ``stop_axis`` defaults to -1, ``start_axis`` to 0 when
    ``stop_axis`` is given). Fluid 1.x's ``flatten(x, axis=k)`` — the 2-D result
    ``[prod(dims[:k]), prod(dims[k:])]``, op ``flatten2`` — when ``axis=`` is given by keyword,
    and ``flatten(x)`` with no axis at all is Fluid's ``fluid.layers.flatten(x)``: ``axis=1``,
    the ``[N, prod(rest)]`` matrix (Paddle 2's no-axis 1-D result is ``flatten(x, 0)``).

    >>> flatten(x)                   # x (-1, 3, 4, 5) -> (-1, 60)   (Fluid's default axis=1)
    >>> flatten(x, start_axis=1)     # x (-1, 3, 4, 5) -> (-1, 60)
    >>> flatten(x, axis=2)           # x (-1, 3, 4, 5) -> (-1, 20)
    """
    if axis is None and start_axis is None and stop_axis is None:
        axis = 1                     # Fluid 1.x's layers.flatten(x, axis=1)
    start_axis = 0 if start_axis is None else start_axis
    stop_axis = -1 if stop_axis is None else stop_axis
    if axis is not None:
        if not 0 <= int(axis) <= x.ndim:
            raise ShapeError(f"flatten: axis {axis} is out of range [0, {x.ndim}] for {x.shape}")
        return _xshape_op(LayerHelper("flatten", name), "flatten2", {"X": x}, {"axis": int(axis)}, x)
    rank = builtins.max(x.ndim, 1)
    attrs = {"start_axis": _axis(start_axis, rank, "flatten"), "stop_axis": _axis(stop_axis, rank, "flatten")}
    if attrs["start_axis"] > attrs["stop_axis"]:
        raise ShapeError(f"flatten: start_axis {start_axis} comes after stop_axis {stop_axis} for {x.shape}")
    helper = LayerHelper("flatten", name)
    return _xshape_op(helper, "flatten_contiguous_range", {"X": x}, attrs, x)


def squeeze(input: Variable, axes: int | Sequence[int] | None = None, name: str | None = None) -> Variable:
    """``input`` without size-1 dims: those of ``axes`` (a listed dim that is not 1 is kept, as in
    Paddle), or all of them when ``axes`` is None or empty."""
    axes = [] if axes is None else _ints(axes, "axes", "squeeze")
    helper = LayerHelper("squeeze", name)
    return _xshape_op(helper, "squeeze2", {"X": input}, {"axes": axes}, input)


def unsqueeze(input: Variable, axes: int | Sequence[int], name: str | None = None) -> Variable:
    """``input`` with size-1 dims inserted at ``axes`` (each relative to the rank reached so far).

    >>> unsqueeze(x, [0, 2])         # x (-1, 3) -> (1, -1, 1, 3)
    """
    helper = LayerHelper("unsqueeze", name)
    return _xshape_op(helper, "unsqueeze2", {"X": input, "AxesTensor": [], "AxesTensorList": []},
                      {"axes": _ints(axes, "axes", "unsqueeze")}, input)


def expand(x: Variable, expand_times, name: str | None = None) -> Variable:
    """``x`` repeated ``expand_times[i]`` times along each dim: Fluid 1.x's ``expand`` (op
    ``expand``), one entry per dim of ``x``. An entry may be a Variable whose value is known when
    the step compiles (``layers.shape(y)[1]``: shapes are static under XLA), as Fluid's
    ``expand_times_tensor``; so may the whole of ``expand_times``. Paddle 2's ``expand`` (broadcast
    to a shape) is :func:`broadcast_to`.

    >>> expand(x, [1, 5, 1])         # x (-1, 1, 3) -> (-1, 5, 3)
    """
    helper = LayerHelper("expand", name)
    inputs: dict = {"X": x}
    if isinstance(expand_times, Variable):
        inputs["ExpandTimes"] = expand_times
        attrs = {"expand_times": [-1] * x.ndim}
    else:
        times = list(expand_times)
        if len(times) != x.ndim:
            raise ShapeError(f"expand: expand_times {times} needs one entry per dim of {x.name!r} {x.shape}")
        attrs = {"expand_times": [-1 if isinstance(t, Variable) else int(t) for t in times]}
        if any(isinstance(t, Variable) for t in times):
            inputs["expand_times_tensor"] = [
                (t if t.dtype == "int32" else cast(t, "int32")) if isinstance(t, Variable)
                else fill_constant([1], "int32", int(t)) for t in times]
    return helper.simple_op("expand", inputs, attrs)


def broadcast_to(x: Variable, shape: Sequence[int], name: str | None = None) -> Variable:
    """``x`` broadcast to ``shape`` (Paddle 2's ``expand`` / ``broadcast_to``, op ``expand_v2``):
    -1 keeps x's dim, size-1 dims stretch, new dims may be added in front.

    >>> broadcast_to(x, [-1, 5, 3])  # x (-1, 1, 3) -> (-1, 5, 3)
    """
    helper = LayerHelper("expand", name)
    return helper.simple_op("expand_v2", {"X": x, "Shape": [], "expand_shapes_tensor": []},
                            {"shape": _ints(shape, "shape", "expand")})


def tile(x: Variable, repeat_times: int | Sequence[int], name: str | None = None) -> Variable:
    """``x`` repeated ``repeat_times[i]`` times along each dim (a shorter list is padded with 1 in
    front; a longer one adds dims in front of x).

    >>> tile(x, [2, 1])              # x (3, 4) -> (6, 4)
    """
    helper = LayerHelper("tile", name)
    return helper.simple_op("tile", {"X": x, "RepeatTimes": [], "repeat_times_tensor": []},
                            {"repeat_times": _ints(repeat_times, "repeat_times", "tile")})


# -- joining and splitting ---------------------------------------------------------------------------
def _var_list(input, layer: str) -> list[Variable]:
    items = [input] if isinstance(input, Variable) else list(input)
    if not items or not all(isinstance(v, Variable) for v in items):
        raise TypeError(f"{layer}: input must be a non-empty list of Variables, got {input!r}")
    return items


def concat(input: Sequence[Variable], axis: int = 0, name: str | None = None) -> Variable:
    """The Variables of ``input`` joined along ``axis`` (other dims must agree)."""
    xs = _var_list(input, "concat")
    helper = LayerHelper("concat", name)
    return helper.simple_op("concat", {"X": xs}, {"axis": _axis(axis, xs[0].ndim, "concat")})


def split(input: Variable, num_or_sections: int | Sequence[int], dim: int = -1,
          name: str | None = None) -> list[Variable]:
    """``input`` cut along ``dim`` into ``num_or_sections`` equal parts (an int) or parts of the
    listed sizes (one may be -1, inferred). Returns a list of Variables.

    >>> a, b = split(x, [2, -1], dim=1)   # x (-1, 6) -> (-1, 2), (-1, 4)
    """
    axis = _axis(dim, input.ndim, "split")
    if isinstance(num_or_sections, (int, np.integer)):
        num, sections = int(num_or_sections), []
        count = num
    else:
        num, sections = 0, _ints(num_or_sections, "num_or_sections", "split")
        count = len(sections)
    if count <= 0:
        raise ValueError(f"split: num_or_sections must be a positive int or a non-empty list, got {num_or_sections!r}")
    helper = LayerHelper("split", name)
    outs = [helper.create_tmp(input.dtype) for _ in builtins.range(count)]
    helper.append_op("split", {"X": input, "AxisTensor": [], "SectionsTensorList": []}, {"Out": outs},
                     {"num": num, "sections": sections, "axis": axis})
    return outs


def stack(x: Sequence[Variable], axis: int = 0, name: str | None = None) -> Variable:
    """The Variables of ``x`` (one shape) stacked along a new dim ``axis``.

    >>> stack([a, b, c], axis=1)     # three (-1, 4) -> (-1, 3, 4)
    """
    xs = _var_list(x, "stack")
    helper = LayerHelper("stack", name)
    return helper.simple_op("stack", {"X": xs}, {"axis": _axis(axis, xs[0].ndim + 1, "stack")}, out_slot="Y")


def unstack(x: Variable, axis: int = 0, num: int | None = None) -> list[Variable]:
    """The slices of ``x`` along ``axis`` (that dim removed), as a list; its size must be known."""
    axis = _axis(axis, x.ndim, "unstack")
    size = x.shape[axis]
    if num is None:
        if size < 0:
            raise ShapeError(f"unstack: dim {axis} of {x.name!r} {x.shape} is unknown; give num")
        num = size
    if size >= 0 and num != size:
        raise ShapeError(f"unstack: num={num} but dim {axis} of {x.name!r} {x.shape} has size {size}")
    helper = LayerHelper("unstack")
    outs = [helper.create_tmp(x.dtype) for _ in builtins.range(num)]
    helper.append_op("unstack", {"X": x}, {"Y": outs}, {"axis": axis, "num": num})
    return outs


# -- slicing and indexing ----------------------------------------------------------------------------
def slice(input: Variable, axes: Sequence[int], starts: Sequence[int], ends: Sequence[int]) -> Variable:  # noqa: A001
    """``input[starts:ends]`` along ``axes``: negative bounds count from the end, bounds past the
    end are clipped (an end of 10**9 means "to the end").

    >>> slice(x, axes=[1], starts=[1], ends=[-1])   # x (-1, 5) -> (-1, 3)
    """
    axes = [_axis(a, input.ndim, "slice") for a in _ints(axes, "axes", "slice")]
    helper = LayerHelper("slice")
    # A bound may be a Variable (or a list holding some): Fluid 1.8's StartsTensor(List) /
    # EndsTensor(List), read when the step is traced (values computed from shapes are concrete).
    starts, start_inputs = shape_arguments(starts, "slice", helper, tensor_slot="StartsTensor",
                                           list_slot="StartsTensorList")
    ends, end_inputs = shape_arguments(ends, "slice", helper, tensor_slot="EndsTensor", list_slot="EndsTensorList")
    flags = [1] * len(axes)
    if start_inputs or end_inputs:
        flags = [-1] * len(axes) if any(k in ("StartsTensor", "EndsTensor") for k in (*start_inputs, *end_inputs)) \
            else [-1 if s == -1 or e == -1 else 1 for s, e in zip(starts, ends)]
    return helper.simple_op("slice", {"Input": input, "StartsTensor": [], "EndsTensor": [],
                                      "StartsTensorList": [], "EndsTensorList": [], **start_inputs, **end_inputs},
                            {"axes": axes, "starts": starts, "ends": ends, "infer_flags": flags,
                             "decrease_axis": []})


def strided_slice(input: Variable, axes: Sequence[int], starts: Sequence[int], ends: Sequence[int],
                  strides: Sequence[int]) -> Variable:
    """``input[starts:ends:strides]`` along ``axes``. A negative stride walks backwards; with it,
    an end of -1 reaches index 0 (Paddle's rule, unlike Python's).

    >>> strided_slice(x, axes=[1], starts=[-1], ends=[-1], strides=[-1])   # reverse dim 1
    """
    axes = [_axis(a, input.ndim, "strided_slice") for a in _ints(axes, "axes", "strided_slice")]
    helper = LayerHelper("strided_slice")
    return helper.simple_op(
        "strided_slice",
        {"Input": input, "StartsTensor": [], "EndsTensor": [], "StridesTensor": [], "StartsTensorList": [],
         "EndsTensorList": [], "StridesTensorList": []},
        {"axes": axes, "starts": _ints(starts, "starts", "strided_slice"), "ends": _ints(ends, "ends", "strided_slice"),
         "strides": _ints(strides, "strides", "strided_slice"), "infer_flags": [1] * len(axes), "decrease_axis": []})


def gather(input: Variable, index: Variable, overwrite: bool = True, axis: int = 0,
           name: str | None = None) -> Variable:
    """The slices ``input[index[i]]`` along ``axis`` (``index`` 1-d int32/int64).

    ``overwrite`` is accepted for fluid's signature: Paddle 2's ``gather`` op always sums the
    gradients of repeated indices.

    >>> gather(x, idx)               # x (5, 3), idx (4,) -> (4, 3)
    """
    helper = LayerHelper("gather", name)
    return helper.simple_op("gather", {"X": input, "Index": index}, {"axis": _axis(axis, input.ndim, "gather")})


def gather_nd(input: Variable, index: Variable, name: str | None = None) -> Variable:
    """``out[i...] = input[index[i..., 0], ..., index[i..., k-1]]`` (``index``'s last dim is k).

    >>> gather_nd(x, idx)            # x (4, 3, 2), idx (5, 2) -> (5, 2)
    """
    helper = LayerHelper("gather_nd", name)
    return helper.simple_op("gather_nd", {"X": input, "Index": index})


def scatter(input: Variable, index: Variable, updates: Variable, name: str | None = None,
            overwrite: bool = True) -> Variable:
    """``input`` with rows ``index[i]`` set to ``updates[i]`` (``overwrite``), or zeroed and then
    summed with every update aimed at them (``overwrite=False``)."""
    helper = LayerHelper("scatter", name)
    return helper.simple_op("scatter", {"X": input, "Ids": index, "Updates": updates},
                            {"overwrite": bool(overwrite)})


# -- conversion and metadata --------------------------------------------------------------------------
def cast(x: Variable, dtype) -> Variable:
    """``x`` converted to ``dtype`` (floats to ints truncate toward zero)."""
    dtype = dtypes.normalize(dtype)
    helper = LayerHelper("cast")
    out = helper.create_tmp(dtype, stop_gradient=x.stop_gradient or not dtypes.is_float(dtype))
    helper.append_op("cast", {"X": x}, {"Out": out},
                     {"in_dtype": _dtype_enum(x.dtype), "out_dtype": _dtype_enum(dtype)})
    return out


_VALUE_SLOTS = {"bool": "bool_values", "int32": "int32_values", "int64": "int64_values", "float32": "fp32_values",
                "float64": "fp64_values"}


def _assign_value(value, output: Variable | None) -> Variable:
    arr = np.asarray(value)
    if arr.dtype.name not in _VALUE_SLOTS:
        raise TypeError(f"assign: a NumPy value must be bool, int32, int64, float32 or float64, got {arr.dtype}")
    helper = LayerHelper("assign")
    out = output if output is not None else helper.create_tmp(arr.dtype.name, stop_gradient=True)
    values = arr.reshape(-1).astype(int if arr.dtype == bool else arr.dtype).tolist()
    helper.append_op("assign_value", {}, {"Out": out},
                     {"shape": list(arr.shape), "dtype": _dtype_enum(arr.dtype.name), _VALUE_SLOTS[arr.dtype.name]: values})
    return out


def assign(input: Variable, output: Variable | None = None) -> Variable:
    """A copy of ``input`` (into ``output`` when given); a NumPy array (or list) becomes Paddle's
    ``assign_value`` op holding its values (bool, int32, int64, float32 or float64)."""
    if not isinstance(input, Variable):
        return _assign_value(input, output)
    helper = LayerHelper("assign")
    out = output if output is not None else helper.create_tmp(input.dtype)
    helper.append_op("assign", {"X": input}, {"Out": out})
    return out


def shape(input: Variable) -> Variable:
    """The shape of ``input`` as a 1-d int32 Variable (its value is known when the program runs)."""
    helper = LayerHelper("shape")
    out = helper.create_tmp("int32", stop_gradient=True)
    helper.append_op("shape", {"Input": input}, {"Out": out})
    return out


def _number(value, what: str, layer: str):
    if isinstance(value, Variable):
        raise TypeError(f"{layer}: {what} must be a Python number; the length of a range of run-time "
                        "values is unknown, but XLA compiles static shapes")
    return value


def range(start, end, step, dtype, name: str | None = None) -> Variable:  # noqa: A001
    """``start, start + step, ...`` up to (not including) ``end``, as a 1-d Variable of ``dtype``.

    Emits Paddle's ``fill_constant`` × 3 + ``range``; the bounds must be Python numbers, so the
    length is known when the program is built (``ceil((end - start) / step)``).

    >>> range(0, 10, 3, "int64")     # [0, 3, 6, 9], shape (4,)
    """
    from ..lowering.ops.tensor import range_length

    dtype = dtypes.normalize(dtype)
    start, end, step = (_number(v, w, "range") for v, w in ((start, "start"), (end, "end"), (step, "step")))
    if step == 0:
        raise ValueError("range: step must not be 0")
    np_dtype = dtypes.to_numpy(dtype)
    cast_ = (lambda v: int(v)) if np.issubdtype(np_dtype, np.integer) else (lambda v: float(v))
    start, end, step = cast_(start), cast_(end), cast_(step)
    length = range_length(start, end, step)
    helper = LayerHelper("range", name)
    bounds = [fill_constant([1], dtype, v) for v in (start, end, step)]
    out = helper.create_tmp(dtype, stop_gradient=True, shape=(length,))
    helper.append_op("range", {"Start": bounds[0], "End": bounds[1], "Step": bounds[2]}, {"Out": out})
    return out


def arange(start=0, end=None, step=1, dtype=None, name: str | None = None) -> Variable:
    """Paddle 2's ``arange``: ``arange(5)`` is ``range(0, 5, 1)``; ``dtype`` defaults to int64 for
    int bounds and float32 otherwise."""
    if end is None:
        start, end = 0, start
    if dtype is None:
        ints = all(isinstance(v, (int, np.integer)) for v in (start, end, step))
        dtype = "int64" if ints else "float32"
    return range(start, end, step, dtype, name)


def one_hot(input: Variable, depth: int, allow_out_of_range: bool = False) -> Variable:
    """One-hot float32 rows of the int ids ``input``, Fluid 1.x's ``layers.one_hot`` (its ``one_hot``
    op): a trailing dim of 1 is replaced by [depth], so [-1, 1] ids give [-1, depth]. Ids whose
    last dim is not 1 get [depth] appended (what ``fluid.one_hot``, op ``one_hot_v2``, does to any
    ids). Ids outside [0, depth) give rows of zeros. The program holds ``squeeze2`` +
    ``one_hot_v2``, ops Paddle 2.x runs.

    >>> one_hot(label, depth=10)     # label (-1, 1) int64 -> (-1, 10)
    """
    if input.shape and input.shape[-1] == 1:
        input = squeeze(input, [-1])
    return one_hot_v2(input, depth, allow_out_of_range)


@atomic_layer
def one_hot_v2(input: Variable, depth: int, allow_out_of_range: bool = False) -> Variable:
    """One-hot float32 rows of the int ids ``input``: the result has input's shape plus [depth]
    (op ``one_hot_v2``; Fluid 1.6+'s ``fluid.one_hot`` / ``fluid.input.one_hot``, Paddle 2's
    ``paddle.nn.functional.one_hot``). Ids outside [0, depth) give rows of zeros.

    >>> one_hot_v2(label, depth=10)  # label (-1, 1) int64 -> (-1, 1, 10)
    """
    helper = LayerHelper("one_hot_v2")
    out = helper.create_tmp("float32", stop_gradient=True)
    helper.append_op("one_hot_v2", {"X": input}, {"Out": out},
                     {"depth": int(depth), "allow_out_of_range": bool(allow_out_of_range),
                      "dtype": _dtype_enum("float32")})
    return out


# -- creation ------------------------------------------------------------------------------------------
def fill_constant_batch_size_like(input: Variable, shape: Sequence[int], dtype, value, input_dim_idx: int = 0,
                                  output_dim_idx: int = 0, force_cpu: bool = False) -> Variable:
    """A ``shape`` tensor of ``value`` whose dim ``output_dim_idx`` is ``input``'s dim
    ``input_dim_idx`` (the batch size, known at run time).

    >>> fill_constant_batch_size_like(x, [-1, 5], "float32", 0.0)   # x (-1, 3) -> (-1, 5)
    """
    dtype = dtypes.normalize(dtype)
    helper = LayerHelper("fill_constant_batch_size_like")
    out = helper.create_tmp(dtype, stop_gradient=True)
    attrs = fill_constant_attrs(_ints(shape, "shape", "fill_constant_batch_size_like"), dtype, value)
    attrs.update(input_dim_idx=int(input_dim_idx), output_dim_idx=int(output_dim_idx), force_cpu=bool(force_cpu))
    helper.append_op("fill_constant_batch_size_like", {"Input": input}, {"Out": out}, attrs)
    return out


def full_like(x: Variable, fill_value, dtype=None, name: str | None = None) -> Variable:
    """A tensor of ``x``'s shape filled with ``fill_value`` (``fill_any_like``); ``dtype``
    defaults to x's."""
    dtype = dtypes.normalize(dtype) if dtype is not None else x.dtype
    helper = LayerHelper("full_like", name)
    out = helper.create_tmp(dtype, stop_gradient=True)
    helper.append_op("fill_any_like", {"X": x}, {"Out": out},
                     {"value": float(fill_value), "dtype": _dtype_enum(dtype)})
    return out


def zeros_like(x: Variable, out: Variable | None = None) -> Variable:
    """Zeros of ``x``'s shape and dtype (``fill_any_like``)."""
    return _like(x, 0.0, out)


def ones_like(x: Variable, out: Variable | None = None) -> Variable:
    """Ones of ``x``'s shape and dtype (``fill_any_like``)."""
    return _like(x, 1.0, out)


def _like(x: Variable, value: float, out: Variable | None) -> Variable:
    if out is None:
        return full_like(x, value)
    helper = LayerHelper("fill_any_like")
    helper.append_op("fill_any_like", {"X": x}, {"Out": out}, {"value": value, "dtype": _dtype_enum(x.dtype)})
    return out


def zeros(shape: Sequence[int], dtype, force_cpu: bool = False, name: str | None = None) -> Variable:
    """A tensor of zeros (``fill_constant``)."""
    return fill_constant(_ints(shape, "shape", "zeros"), dtype, 0.0, name=name)


def ones(shape: Sequence[int], dtype, force_cpu: bool = False, name: str | None = None) -> Variable:
    """A tensor of ones (``fill_constant``)."""
    return fill_constant(_ints(shape, "shape", "ones"), dtype, 1.0, name=name)


def _random(op_type: str, shape, dtype, attrs: dict, name: str | None, layer: str) -> Variable:
    dtype = dtypes.normalize(dtype)
    helper = LayerHelper(layer, name)
    shape, shape_inputs = shape_arguments(shape, layer, helper)
    if any(d <= 0 for d in shape) and not shape_inputs:
        raise ShapeError(f"{layer}: shape {shape} must hold positive sizes")
    out = helper.create_tmp(dtype, stop_gradient=True)
    helper.append_op(op_type, {"ShapeTensor": [], "ShapeTensorList": [], **shape_inputs}, {"Out": out},
                     {"shape": shape, "dtype": _dtype_enum(dtype), **attrs})
    return out


def uniform_random(shape: Sequence[int], dtype="float32", min: float = -1.0, max: float = 1.0,  # noqa: A002
                   seed: int = 0, name: str | None = None) -> Variable:
    """Uniform numbers in [min, max). A non-zero ``seed`` fixes them; otherwise they follow the
    program's ``random_seed`` (and differ from run to run)."""
    if not dtypes.is_float(dtype):
        raise TypeError(f"uniform_random: dtype must be a float type, got {dtype!r}")
    return _random("uniform_random", shape, dtype, {"min": float(min), "max": float(max), "seed": int(seed)},
                   name, "uniform_random")


def gaussian_random(shape: Sequence[int], mean: float = 0.0, std: float = 1.0, seed: int = 0, dtype="float32",
                    name: str | None = None) -> Variable:
    """Normal numbers with ``mean`` and ``std`` (seeded as :func:`uniform_random`)."""
    if not dtypes.is_float(dtype):
        raise TypeError(f"gaussian_random: dtype must be a float type, got {dtype!r}")
    return _random("gaussian_random", shape, dtype, {"mean": float(mean), "std": float(std), "seed": int(seed)},
                   name, "gaussian_random")


def randint(low: int = 0, high: int | None = None, shape: Sequence[int] = (1,), dtype=None,
            name: str | None = None, seed: int = 0) -> Variable:
    """Integers drawn uniformly from [low, high) (Paddle 2's ``randint``: with ``high`` None the
    range is [0, low)); ``dtype`` int64 by default, or int32."""
    if high is None:
        low, high = 0, low
    if low >= high:
        raise ValueError(f"randint: needs low < high, got low={low}, high={high}")
    dtype = dtypes.normalize(dtype or "int64")
    if dtype not in ("int32", "int64"):
        raise TypeError(f"randint: dtype must be int32 or int64, got {dtype}")
    return _random("randint", shape, dtype, {"low": int(low), "high": int(high), "seed": int(seed)}, name, "randint")


# -- padding -----------------------------------------------------------------------------------------
def pad(x: Variable, paddings: Sequence[int], pad_value: float = 0.0, name: str | None = None) -> Variable:
    """``x`` padded with ``pad_value``: ``paddings`` holds (before, after) for every dim.

    >>> pad(x, [0, 0, 1, 2])         # x (-1, 3) -> (-1, 6)
    """
    helper = LayerHelper("pad", name)
    return helper.simple_op("pad", {"X": x}, {"paddings": _ints(paddings, "paddings", "pad"),
                                              "pad_value": float(pad_value)})


def pad3d(input: Variable, paddings: int | Sequence[int], mode: str = "constant", value: float = 0.0,
          data_format: str = "NCDHW", name: str | None = None) -> Variable:
    """A 5-d ``input`` padded in its spatial dims: ``paddings`` = [left, right, top, bottom,
    front, back] (an int pads every side); ``mode`` constant (``value``), reflect, replicate or
    circular."""
    pads = _ints(paddings, "paddings", "pad3d")
    if len(pads) == 1:
        pads = pads * 6
    helper = LayerHelper("pad3d", name)
    return helper.simple_op("pad3d", {"X": input, "Paddings": []},
                            {"paddings": pads, "mode": mode, "value": float(value), "data_format": data_format})
