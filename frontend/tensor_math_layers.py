"""Fluid 1.8's tensor layers beyond :mod:`.tensor_layers` and :mod:`.math_layers`: batched and
Kronecker products, index selection and sampling, triangles, flips and rolls, sorting, boolean
reductions and checks, normalization helpers, channel and pixel shuffles, ``unfold``,
``gather_tree``, ``mul``, ``sum``. Each appends the op Paddle 2.6 runs for it, with Fluid 1.8's
arguments and defaults.

>>> y = bmm(a, b)                       # [B, n, k] x [B, k, m] -> [B, n, m]
>>> out, idx = argsort(x, axis=1, descending=True)
"""

from __future__ import annotations

from typing import Sequence

from ..ir.variable import Variable
from .layer_helper import LayerHelper
from .layer_args import activate, shape_arguments
from .math_layers import _reduce_layer, fluid1_one_element

__all__ = ["bmm", "kron", "dot", "t", "index_select", "index_sample", "dist", "tril", "triu", "flip", "reverse",
           "roll", "argsort", "reduce_all", "reduce_any", "has_inf", "has_nan", "allclose", "elementwise_equal",
           "logsumexp", "clamp", "addcmul", "l2_normalize", "lrn", "label_smooth", "pad2d", "crop_tensor", "crop",
           "expand_as", "size", "rank", "mul", "maxout", "affine_channel", "shuffle_channel", "pixel_shuffle",
           "unfold", "gather_tree", "clip_by_norm", "sum", "unique", "unique_with_counts", "diag", "meshgrid",
           "cross", "trace", "addmm", "diag_embed", "scatter_nd_add", "scatter_nd", "multiplex", "shard_index",
           "temporal_shift"]

reduce_all = _reduce_layer("reduce_all", "logical AND")
reduce_any = _reduce_layer("reduce_any", "logical OR")


def _op(op_type: str, inputs: dict, attrs: dict | None = None, name: str | None = None, dtype=None,
        out_slot: str = "Out") -> Variable:
    return LayerHelper(op_type, name).simple_op(op_type, inputs, attrs or {}, out_slot=out_slot, dtype=dtype)


def _ints(value, n: int | None = None) -> list[int]:
    values = [int(value)] * (n or 1) if isinstance(value, int) else [int(v) for v in value]
    return values


def bmm(x: Variable, y: Variable, name: str | None = None) -> Variable:
    """Batched matrix product: [B, n, k] x [B, k, m] -> [B, n, m]."""
    return _op("bmm", {"X": x, "Y": y}, name=name)


def kron(x: Variable, y: Variable, out: Variable | None = None, name: str | None = None) -> Variable:
    """The Kronecker product of x and y."""
    return _op("kron", {"X": x, "Y": y}, name=name)


def dot(x: Variable, y: Variable, name: str | None = None) -> Variable:
    """The inner product along the last dim (rows of 2-D inputs), keeping that dim as 1."""
    helper = LayerHelper("dot", name)
    product = helper.simple_op("elementwise_mul", {"X": x, "Y": y}, {"axis": -1})
    return helper.simple_op("reduce_sum", {"X": product}, {"dim": [-1], "keep_dim": True, "reduce_all": False})


def t(input: Variable, name: str | None = None) -> Variable:
    """The transpose of a matrix (a 0-D or 1-D input is returned as is)."""
    if input.ndim < 2:
        return input
    if input.ndim > 2:
        raise ValueError(f"t: input must have rank <= 2, got {input.shape}")
    return _op("transpose", {"X": input}, {"axis": [1, 0]}, name)


def index_select(input: Variable, index: Variable, dim: int = 0) -> Variable:
    """The entries of ``input`` at ``index`` along ``dim``."""
    return _op("index_select", {"X": input, "Index": index}, {"dim": int(dim)})


def index_sample(x: Variable, index: Variable) -> Variable:
    """Row i's entries at index[i] ([N, D] and [N, k] -> [N, k])."""
    return _op("index_sample", {"X": x, "Index": index})


def dist(x: Variable, y: Variable, p: float = 2) -> Variable:
    """The p-norm of x - y (broadcast)."""
    return _op("dist", {"X": x, "Y": y}, {"p": float(p)})


def tril(input: Variable, diagonal: int = 0, name: str | None = None) -> Variable:
    """The lower triangle (at and below ``diagonal``) of the last two dims; the rest 0."""
    return _op("tril_triu", {"X": input}, {"diagonal": int(diagonal), "lower": True}, name)


def triu(input: Variable, diagonal: int = 0, name: str | None = None) -> Variable:
    """The upper triangle (at and above ``diagonal``) of the last two dims; the rest 0."""
    return _op("tril_triu", {"X": input}, {"diagonal": int(diagonal), "lower": False}, name)


def flip(input: Variable, dims: int | Sequence[int], name: str | None = None) -> Variable:
    """``input`` reversed along ``dims``."""
    return _op("flip", {"X": input}, {"axis": _ints(dims)}, name)


def reverse(x: Variable, axis: int | Sequence[int]) -> Variable:
    """``x`` reversed along ``axis`` (Fluid's ``reverse``; Paddle 2.6 runs it as ``flip``)."""
    return _op("flip", {"X": x}, {"axis": _ints(axis)})


def roll(input: Variable, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None) -> Variable:
    """``input`` shifted cyclically by ``shifts`` along ``dims`` (flattened when None)."""
    return _op("roll", {"X": input}, {"shifts": _ints(shifts), "axis": [] if dims is None else _ints(dims)})


def argsort(input: Variable, axis: int = -1, descending: bool = False, name: str | None = None):
    """(sorted values, their int64 indices) along ``axis``."""
    helper = LayerHelper("argsort", name)
    out, ids = helper.create_tmp(input.dtype), helper.create_tmp("int64", stop_gradient=True)
    helper.append_op("argsort", {"X": input}, {"Out": out, "Indices": ids},
                     {"axis": int(axis), "descending": bool(descending)})
    return out, ids


def _any_where(op_type: str, x: Variable) -> Variable:
    helper = LayerHelper(op_type)
    flags = helper.simple_op(op_type, {"X": x}, dtype="bool")
    # Fluid 1.8's isinf/isnan ops gave shape [1] (isfinite_op: SetOutputDim("Out", {1}))
    return fluid1_one_element(
        helper.simple_op("reduce_any", {"X": flags}, {"dim": [], "keep_dim": False, "reduce_all": True}))


def has_inf(x: Variable) -> Variable:
    """Whether any entry of x is ±inf (a bool of shape [1], Fluid 1.x's)."""
    return _any_where("isinf_v2", x)


def has_nan(x: Variable) -> Variable:
    """Whether any entry of x is NaN (a bool of shape [1], Fluid 1.x's)."""
    return _any_where("isnan_v2", x)


def allclose(input: Variable, other: Variable, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False,
             name: str | None = None) -> Variable:
    """Whether every |input - other| <= atol + rtol * |other| (a bool)."""
    helper = LayerHelper("allclose", name)
    close = helper.simple_op("isclose", {"Input": input, "Other": other},
                             {"rtol": str(rtol), "atol": str(atol), "equal_nan": bool(equal_nan)}, dtype="bool")
    return helper.simple_op("reduce_all", {"X": close}, {"dim": [], "keep_dim": False, "reduce_all": True})


def elementwise_equal(x: Variable, y: Variable, name: str | None = None) -> Variable:
    """x == y elementwise (op ``equal``)."""
    return _op("equal", {"X": x, "Y": y}, {"axis": -1}, name, dtype="bool")


def logsumexp(x: Variable, dim: int | Sequence[int] | None = None, keepdim: bool = False,
              out: Variable | None = None, name: str | None = None) -> Variable:
    """log(sum(exp(x))) over ``dim`` (every dim when None)."""
    dims = [] if dim is None else _ints(dim)
    return _op("logsumexp", {"X": x}, {"axis": dims, "keepdim": bool(keepdim), "reduce_all": not dims}, name)


def clamp(input: Variable, min: float | None = None, max: float | None = None,  # noqa: A002
          output: Variable | None = None, name: str | None = None) -> Variable:
    """``input`` limited to [min, max] (an absent bound does not limit)."""
    attrs = {}
    if min is not None:
        attrs["min"] = float(min)
    if max is not None:
        attrs["max"] = float(max)
    return _op("clip", {"X": input}, attrs, name)


def addcmul(input: Variable, tensor1: Variable, tensor2: Variable, value: float = 1.0,
            out: Variable | None = None, name: str | None = None) -> Variable:
    """input + value * tensor1 * tensor2."""
    helper = LayerHelper("addcmul", name)
    product = helper.simple_op("elementwise_mul", {"X": tensor1, "Y": tensor2}, {"axis": -1})
    scaled = helper.simple_op("scale", {"X": product}, {"scale": float(value), "bias": 0.0, "bias_after_scale": True})
    return helper.simple_op("elementwise_add", {"X": input, "Y": scaled}, {"axis": -1})


def l2_normalize(x: Variable, axis: int, epsilon: float = 1e-12, name: str | None = None) -> Variable:
    """x / sqrt(sum(x ** 2 along axis) + epsilon) (op ``norm``)."""
    helper = LayerHelper("l2_normalize", name)
    out, norm = helper.create_tmp(x.dtype), helper.create_tmp(x.dtype, stop_gradient=True)
    helper.append_op("norm", {"X": x}, {"Out": out, "Norm": norm},
                     {"axis": 0 if x.ndim == 1 else int(axis), "epsilon": float(epsilon)})
    return out


def lrn(input: Variable, n: int = 5, k: float = 1.0, alpha: float = 1e-4, beta: float = 0.75,
        name: str | None = None, data_format: str = "NCHW") -> Variable:
    """Local response normalization across channels of 4-D ``input``."""
    helper = LayerHelper("lrn", name)
    out, mid = helper.create_tmp(input.dtype), helper.create_tmp(input.dtype, stop_gradient=True)
    helper.append_op("lrn", {"X": input}, {"Out": out, "MidOut": mid},
                     {"n": int(n), "k": float(k), "alpha": float(alpha), "beta": float(beta),
                      "data_format": data_format})
    return out


def label_smooth(label: Variable, prior_dist: Variable | None = None, epsilon: float = 0.1, dtype="float32",
                 name: str | None = None) -> Variable:
    """(1 - epsilon) * label + epsilon * prior_dist (uniform over the classes when None)."""
    inputs = {"X": label}
    if prior_dist is not None:
        inputs["PriorDist"] = prior_dist
    return _op("label_smooth", inputs, {"epsilon": float(epsilon)}, name)


def pad2d(input: Variable, paddings=(0, 0, 0, 0), mode: str = "constant", pad_value: float = 0.0,
          data_format: str = "NCHW", name: str | None = None) -> Variable:
    """4-D ``input`` padded by [top, bottom, left, right] (``constant``, ``reflect`` or ``edge``)."""
    inputs, attrs = {"X": input}, {"mode": mode, "pad_value": float(pad_value), "data_format": data_format}
    if isinstance(paddings, Variable):
        inputs["Paddings"] = paddings
    else:
        attrs["paddings"] = _ints(paddings)
    return _op("pad2d", inputs, attrs, name)


def crop_tensor(x: Variable, shape=None, offsets=None, name: str | None = None) -> Variable:
    """The region of ``x`` of ``shape`` (-1: to the end) starting at ``offsets`` (0 when None)."""
    helper = LayerHelper("crop_tensor", name)
    # shape / offsets may be Variables or lists holding some (Fluid 1.8's Shape / ShapeTensor,
    # Offsets / OffsetsTensor); the shape's values must be known when the step is traced.
    shape, inputs = shape_arguments(shape if shape is not None else list(x.shape), "crop_tensor", helper,
                                    tensor_slot="Shape", list_slot="ShapeTensor")
    offsets, offset_inputs = shape_arguments(offsets if offsets is not None else [0] * x.ndim, "crop_tensor",
                                             helper, tensor_slot="Offsets", list_slot="OffsetsTensor")
    return helper.simple_op("crop_tensor", {"X": x, **inputs, **offset_inputs}, {"shape": shape, "offsets": offsets})


def crop(x: Variable, shape=None, offsets=None, name: str | None = None) -> Variable:
    """Fluid's ``crop``: the region of ``x`` shaped like ``shape`` (a list, or a Variable whose
    shape is used) starting at ``offsets`` (run as ``crop_tensor``)."""
    if isinstance(shape, Variable):
        shape = [x.shape[i] if d < 0 else d for i, d in enumerate(shape.shape)]
    return crop_tensor(x, shape, offsets, name)


def expand_as(x: Variable, target_tensor: Variable, name: str | None = None) -> Variable:
    """``x`` repeated to ``target_tensor``'s shape."""
    return _op("expand_as_v2", {"X": x, "Y": target_tensor}, {"target_shape": list(target_tensor.shape)}, name)


def size(input: Variable) -> Variable:
    """The number of elements of ``input`` (int64)."""
    return _op("size", {"Input": input}, dtype="int64")


def rank(input: Variable) -> Variable:
    """The rank of ``input``, an int32 constant of shape [1]."""
    helper = LayerHelper("rank")
    out = helper.create_tmp("int32", stop_gradient=True)
    helper.append_op("fill_constant", {}, {"Out": out},
                     {"shape": [1], "dtype": 2, "value": float(input.ndim), "str_value": str(input.ndim)})
    return out


def mul(x: Variable, y: Variable, x_num_col_dims: int = 1, y_num_col_dims: int = 1, name: str | None = None) -> Variable:
    """Matrix product of x and y each flattened to 2-D at ``*_num_col_dims``."""
    return _op("mul", {"X": x, "Y": y}, {"x_num_col_dims": int(x_num_col_dims), "y_num_col_dims": int(y_num_col_dims)},
               name)


def maxout(x: Variable, groups: int, name: str | None = None, axis: int = 1) -> Variable:
    """The maximum of each run of ``groups`` channels."""
    return _op("maxout", {"X": x}, {"groups": int(groups), "axis": int(axis)}, name)


def affine_channel(x: Variable, scale: Variable | None = None, bias: Variable | None = None,
                   data_layout: str = "NCHW", name: str | None = None, act=None) -> Variable:
    """x * scale + bias per channel, then ``act``."""
    helper = LayerHelper("affine_channel", name)
    out = helper.simple_op("affine_channel", {"X": x, "Scale": scale, "Bias": bias}, {"data_layout": data_layout})
    return activate(out, act, helper)


def shuffle_channel(x: Variable, group: int, name: str | None = None) -> Variable:
    """Channels regrouped: [N, g·k, H, W] viewed as [g, k] and transposed."""
    return _op("shuffle_channel", {"X": x}, {"group": int(group)}, name)


def pixel_shuffle(x: Variable, upscale_factor: int) -> Variable:
    """[N, C·r², H, W] -> [N, C, H·r, W·r]."""
    return _op("pixel_shuffle", {"X": x}, {"upscale_factor": int(upscale_factor)})


def unfold(x: Variable, kernel_sizes, strides=1, paddings=0, dilations=1, name: str | None = None) -> Variable:
    """im2col: sliding blocks of 4-D ``x`` as columns, [N, C·kh·kw, blocks]."""
    paddings = _ints(paddings, 4)
    if len(paddings) == 2:
        paddings = paddings * 2
    return _op("unfold", {"X": x}, {"kernel_sizes": _ints(kernel_sizes, 2), "strides": _ints(strides, 2),
                                    "paddings": paddings, "dilations": _ints(dilations, 2)}, name, out_slot="Y")


def gather_tree(ids: Variable, parents: Variable) -> Variable:
    """Full beam-search paths from per-step ids and parent beams ([time, batch, beam])."""
    return _op("gather_tree", {"Ids": ids, "Parents": parents})


def clip_by_norm(x: Variable, max_norm: float, name: str | None = None) -> Variable:
    """x scaled down so that its L2 norm is at most ``max_norm``."""
    return _op("clip_by_norm", {"X": x}, {"max_norm": float(max_norm)}, name)


def sum(x) -> Variable:  # noqa: A001  (fluid.layers' name)
    """The elementwise sum of a list of Variables (op ``sum``)."""
    return _op("sum", {"X": list(x) if isinstance(x, (list, tuple)) else [x]})


def _unique(x: Variable, dtype, counts: bool):
    from ..ir import dtypes
    helper = LayerHelper("unique")
    out, index = helper.create_tmp(x.dtype, stop_gradient=True), helper.create_tmp(dtype, stop_gradient=True)
    outputs = {"Out": out, "Index": index}
    if counts:
        outputs["Counts"] = helper.create_tmp(dtype, stop_gradient=True)
    helper.append_op("unique", {"X": x}, outputs,
                     {"dtype": dtypes.to_enum(dtypes.normalize(dtype)), "is_sorted": False,
                      "return_inverse": True, "return_counts": counts})
    return (out, index, outputs["Counts"]) if counts else (out, index)


def unique(x: Variable, dtype="int32"):
    """(the distinct values of 1-D ``x`` in order of first appearance, each entry's index into them)."""
    return _unique(x, dtype, counts=False)


def unique_with_counts(x: Variable, dtype="int32"):
    """:func:`unique` and how often each distinct value occurs."""
    return _unique(x, dtype, counts=True)


def diag(diagonal: Variable) -> Variable:
    """The square matrix with ``diagonal`` (1-D) on its diagonal."""
    return _op("diag_v2", {"X": diagonal}, {"offset": 0, "padding_value": 0.0})


def meshgrid(input: Sequence[Variable], name: str | None = None) -> list[Variable]:
    """Coordinate grids from 1-D Variables: the k-th varies along dim k."""
    helper = LayerHelper("meshgrid", name)
    outs = [helper.create_tmp(v.dtype) for v in input]
    helper.append_op("meshgrid", {"X": list(input)}, {"Out": outs})
    return outs


def cross(input: Variable, other: Variable, dim: int | None = None) -> Variable:
    """The cross product along ``dim`` (size 3; None: the first dim of size 3)."""
    if dim is None:
        dim = next((i for i, d in enumerate(input.shape) if d == 3), None)
        if dim is None:
            raise ValueError(f"cross: input {input.shape} has no dim of size 3")
    return _op("cross", {"X": input, "Y": other}, {"dim": int(dim)})


def trace(input: Variable, offset: int = 0, dim1: int = 0, dim2: int = 1, out=None, name: str | None = None):
    """The sum of diagonal ``offset`` of the (dim1, dim2) planes (those dims removed)."""
    return _op("trace", {"Input": input}, {"offset": int(offset), "axis1": int(dim1), "axis2": int(dim2)}, name)


def addmm(input: Variable, x: Variable, y: Variable, alpha: float = 1.0, beta: float = 1.0,
          name: str | None = None) -> Variable:
    """beta·input + alpha·(x @ y), input broadcast to the product's shape."""
    return _op("addmm", {"Input": input, "X": x, "Y": y}, {"Alpha": float(alpha), "Beta": float(beta)}, name)


def diag_embed(input: Variable, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Variable:
    """Matrices (in the output's dims dim1, dim2) with input's last dim on diagonal ``offset``."""
    return _op("diag_embed", {"Input": input}, {"offset": int(offset), "dim1": int(dim1), "dim2": int(dim2)})


def scatter_nd_add(ref: Variable, index: Variable, updates: Variable, name: str | None = None) -> Variable:
    """``ref`` with ``updates`` added at the coordinates ``index`` [..., k] (repeats add up)."""
    return _op("scatter_nd_add", {"X": ref, "Index": index, "Updates": updates}, name=name)


def scatter_nd(index: Variable, updates: Variable, shape, name: str | None = None) -> Variable:
    """Zeros of ``shape`` with ``updates`` added at ``index`` (Fluid's scatter_nd_add on zeros)."""
    from .tensor_layers import fill_constant

    return scatter_nd_add(fill_constant(shape, updates.dtype, 0.0), index, updates, name)


def multiplex(inputs, index: Variable) -> Variable:
    """Row i from ``inputs[index[i]]`` (inputs of one shape, ``index`` [N, 1] int32)."""
    if len(inputs) < 2:
        raise ValueError("multiplex: inputs needs at least two Variables")
    return _op("multiplex", {"X": list(inputs), "Ids": index})


def shard_index(input: Variable, index_num: int, nshards: int, shard_id: int, ignore_value: int = -1) -> Variable:
    """Ids in shard ``shard_id`` of ``nshards`` become offsets in it; the others ``ignore_value``."""
    if not 0 <= shard_id < nshards:
        raise ValueError(f"shard_index: shard_id must be in [0, {nshards}), got {shard_id}")
    return _op("shard_index", {"X": input}, {"index_num": int(index_num), "nshards": int(nshards),
                                             "shard_id": int(shard_id), "ignore_value": int(ignore_value)})


def temporal_shift(x: Variable, seg_num: int, shift_ratio: float = 0.25, name: str | None = None) -> Variable:
    """TSM: in [N·seg_num, C, H, W], the first C·ratio channels take the previous frame's values and
    the next C·ratio the next frame's."""
    return _op("temporal_shift", {"X": x}, {"seg_num": int(seg_num), "shift_ratio": float(shift_ratio)}, name)
