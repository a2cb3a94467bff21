"""The layer API: functions that append ops to the default main program and return Variables.

>>> x = data("images", input_size=64 * 64)                 # (-1, 4096)
>>> y = fc(x, output_size=100, activation="softmax")       # (-1, 100)
"""

from __future__ import annotations

from typing import Callable, Sequence

from ..ir import dtypes, registry
from ..ir.errors import ShapeError
from ..ir.program import default_main_program
from ..ir.variable import Variable
from .initializer import fill_constant_attrs
from .layer_helper import LayerHelper, atomic_layer
from .param_attr import ParamAttr

__all__ = [
    "data", "fc", "cross_entropy", "mean", "softmax", "relu", "sigmoid", "tanh", "square_error_cost",
    "fill_constant", "elementwise_add", "elementwise_sub", "elementwise_mul", "elementwise_div", "scale",
]


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


def _is_activation(op_type: str) -> bool:
    """An op usable as ``activation=``: registered, one input X, one output Out, no required attrs."""
    if not registry.has(op_type):
        return False
    opdef = registry.get(op_type)
    return ([s.name for s in opdef.inputs] == ["X"] and [s.name for s in opdef.outputs] == ["Out"]
            and opdef.forward_type is None and opdef.grad is not None)


def _activate(x: Variable, activation, helper: LayerHelper) -> Variable:
    """Apply ``activation``: a layer function, or the name of an elementwise op (``"relu"``)."""
    if activation is None:
        return x
    if callable(activation):
        return activation(x)
    if not isinstance(activation, str) or not _is_activation(activation):
        known = sorted(t for t in registry.registered_types() if _is_activation(t))
        raise ValueError(f"unknown activation {activation!r}; use a layer function or one of {known}")
    return helper.simple_op(activation, {"X": x})


def fc(input: Variable | Sequence[Variable], output_size: int, activation: str | Callable | None = None,
       num_flatten_dims: int = 1, param_attr=None, bias_attr=None, name: str | None = None) -> Variable:
    """A fully connected layer: ``activation(input · W + b)``, emitted as ``mul``, ``elementwise_add``
    and the activation op. ``W`` is ``[prod(input.shape[num_flatten_dims:]), output_size]``.

    ``input`` may be a list of Variables (Fluid 1.x): each gets its own weight (``fc_0.w_0``,
    ``fc_0.w_1``, … — ``param_attr`` may be a list with one attr per input), the products are
    added by a ``sum`` op, and one bias follows.

    >>> fc([fc_last, lstm_last], output_size=2, activation="softmax")   # doctest: +SKIP
    """
    if not isinstance(output_size, int) or output_size <= 0:
        raise ValueError(f"fc: output_size must be a positive int, got {output_size!r}")
    inputs = list(input) if isinstance(input, (list, tuple)) else [input]
    if not inputs:
        raise ValueError("fc: input is an empty list")
    attrs = list(param_attr) if isinstance(param_attr, (list, tuple)) else [param_attr] * len(inputs)
    if len(attrs) != len(inputs):
        raise ValueError(f"fc: {len(attrs)} param_attr for {len(inputs)} inputs")
    helper = LayerHelper("fc", name)
    dtype = inputs[0].dtype
    products = []
    for x, attr in zip(inputs, attrs):
        in_features = 1
        for d in x.shape[num_flatten_dims:]:
            if d < 0:
                raise ShapeError(f"fc: the dims of {x.name!r} {x.shape} after num_flatten_dims="
                                 f"{num_flatten_dims} must be known to size the weight")
            in_features *= d
        w = helper.create_parameter(ParamAttr.to_attr(attr), (in_features, output_size), dtype)
        tmp = helper.create_tmp(dtype)
        helper.append_op("mul", {"X": x, "Y": w}, {"Out": tmp},
                         {"x_num_col_dims": num_flatten_dims, "y_num_col_dims": 1})
        products.append(tmp)
    tmp = products[0]
    if len(products) > 1:
        tmp = helper.create_tmp(dtype)
        helper.append_op("sum", {"X": products}, {"Out": tmp}, {})
    battr = ParamAttr.to_attr(bias_attr)
    if battr is not None:
        b = helper.create_parameter(battr, (output_size,), dtype, is_bias=True)
        pre = helper.create_tmp(dtype)
        helper.append_op("elementwise_add", {"X": tmp, "Y": b}, {"Out": pre}, {"axis": num_flatten_dims})
        tmp = pre
    return _activate(tmp, activation, helper)


def cross_entropy(input: Variable, label: Variable, soft_label: bool | None = None,
                  ignore_index: int = -100) -> Variable:
    """Cross entropy of probabilities ``input`` (-1, C) against ``label``; result (-1, 1).

    ``soft_label=None`` decides from the label: an integer label of shape (-1, 1) holds class
    indices; a float label is a soft (or one-hot) distribution over the classes. A float label
    narrower than C is taken as a distribution over the first classes and zero-padded (a ``pad``
    op, visible in the program); with ``soft_label=True`` the widths must match exactly.
    """
    helper = LayerHelper("cross_entropy")
    if soft_label is None:
        soft_label = dtypes.is_float(label.dtype)
        classes, width = input.shape[-1], label.shape[-1]
        if soft_label and 0 < width < classes and label.ndim == input.ndim:
            padded = helper.create_tmp(label.dtype, stop_gradient=True)
            paddings = [0, 0] * (label.ndim - 1) + [0, classes - width]
            helper.append_op("pad", {"X": label}, {"Out": padded}, {"paddings": paddings, "pad_value": 0.0})
            label = padded
    out = helper.create_tmp(input.dtype)
    helper.append_op("cross_entropy", {"X": input, "Label": label}, {"Y": out},
                     {"soft_label": bool(soft_label), "ignore_index": ignore_index})
    return out


def mean(x: Variable, name: str | None = None) -> Variable:
    """The mean of all elements, a 0-d Variable."""
    return LayerHelper("mean", name).simple_op("mean", {"X": x})


def softmax(input: Variable, axis: int = -1, name: str | None = None) -> Variable:
    """Softmax along ``axis``."""
    return LayerHelper("softmax", name).simple_op("softmax", {"X": input}, {"axis": axis})


def relu(x: Variable, name: str | None = None) -> Variable:
    """max(x, 0)."""
    return LayerHelper("relu", name).simple_op("relu", {"X": x})


def sigmoid(x: Variable, name: str | None = None) -> Variable:
    """1 / (1 + exp(-x))."""
    return LayerHelper("sigmoid", name).simple_op("sigmoid", {"X": x})


def tanh(x: Variable, name: str | None = None) -> Variable:
    """tanh(x)."""
    return LayerHelper("tanh", name).simple_op("tanh", {"X": x})


def square_error_cost(input: Variable, label: Variable) -> Variable:
    """(input - label)², element by element (Paddle emits ``elementwise_sub`` and ``square``)."""
    helper = LayerHelper("square_error_cost")
    diff = helper.simple_op("elementwise_sub", {"X": input, "Y": label}, {"axis": -1})
    return helper.simple_op("square", {"X": diff})


def fill_constant(shape: Sequence[int], dtype, value, *, out: Variable | None = None,
                  name: str | None = None) -> Variable:
    """A tensor of ``shape`` filled with ``value``."""
    helper = LayerHelper("fill_constant", name)
    dtype = dtypes.normalize(dtype)
    out = out if out is not None else helper.create_tmp(dtype, stop_gradient=True)
    helper.append_op("fill_constant", outputs={"Out": out}, attrs=fill_constant_attrs(shape, dtype, value))
    return out


def scale(x: Variable, scale: float = 1.0, bias: float = 0.0, bias_after_scale: bool = True,
          name: str | None = None) -> Variable:
    """scale * x + bias."""
    return LayerHelper("scale", name).simple_op(
        "scale", {"X": x}, {"scale": float(scale), "bias": float(bias), "bias_after_scale": bias_after_scale})


def _elementwise(op_type: str):
    def layer(x: Variable, y: Variable, axis: int = -1, activation=None, name: str | None = None) -> Variable:
        helper = LayerHelper(op_type, name)
        return _activate(helper.simple_op(op_type, {"X": x, "Y": y}, {"axis": axis}), activation, helper)

    layer.__name__ = op_type
    layer.__doc__ = f"``{op_type}`` of x and y with Paddle's ``axis`` broadcasting; optional activation."
    return layer


elementwise_add = _elementwise("elementwise_add")
elementwise_sub = _elementwise("elementwise_sub")
elementwise_mul = _elementwise("elementwise_mul")
elementwise_div = _elementwise("elementwise_div")


# Layer families defined in their own modules are part of `fj.layer` too.
from .math_layers import *  # noqa: E402,F401,F403
from .nn_layers import *  # noqa: E402,F401,F403
from .tensor_layers import *  # noqa: E402,F401,F403
from .sequence_layers import *  # noqa: E402,F401,F403
from .recurrent_layers import *  # noqa: E402,F401,F403
from .crf_layers import *  # noqa: E402,F401,F403
from .control_flow_layers import *  # noqa: E402,F401,F403
from .dynamic_rnn import *  # noqa: E402,F401,F403
from .rnn_layers import *  # noqa: E402,F401,F403


def _make_atomic() -> None:
    """Wrap every public layer function with :func:`~.layer_helper.atomic_layer`: each public
    function of ``fj.layer`` defined in ``fluidjax.frontend`` (this module and the families it
    star-imports), both here and in its defining module (so ``from ..nn_layers import conv2d``
    is atomic too, and layers calling each other go through the wrapped versions)."""
    import inspect
    import sys

    package = __name__.rsplit(".", 1)[0] + "."
    namespace = globals()
    for name, fn in list(namespace.items()):
        if name.startswith("_") or not inspect.isfunction(fn) or getattr(fn, "__fluidjax_atomic__", False):
            continue
        module = sys.modules.get(fn.__module__)
        if not fn.__module__.startswith(package) or name not in getattr(module, "__all__", ()):
            continue
        wrapped = atomic_layer(fn)
        namespace[name] = wrapped
        if getattr(module, name, None) is fn:
            setattr(module, name, wrapped)


_make_atomic()
