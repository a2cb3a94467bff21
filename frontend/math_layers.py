"""Math layer functions: reductions, searches, activations, elementwise math, comparisons, logic.

Names, parameters and defaults follow Paddle's ``fluid.layers``; the ops they emit and their
results follow Paddle 2.6, except the shapes Fluid 1.x scripts read: a mean, a full reduction
(and ``accuracy``) is shape ``[1]``, as Fluid 1.x computed it (:func:`fluid1_one_element`).

>>> x = data("x", dims=[3, 4])                 # (-1, 3, 4)
>>> s = reduce_sum(x, dim=1)                   # (-1, 4)
>>> values, indices = topk(s, k=2)             # (-1, 2), (-1, 2) int64
"""

from __future__ import annotations

from typing import Sequence

from ..ir.variable import Variable
from .layer_helper import LayerHelper
from .layer_args import activate

__all__ = [
    # reductions and searches
    "reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod", "argmax", "argmin", "topk",
    "cumsum",
    # activations and unary math
    "relu6", "leaky_relu", "elu", "gelu", "swish", "silu", "hard_swish", "hard_sigmoid", "softplus", "softsign",
    "exp", "log", "sqrt", "rsqrt", "abs", "square", "pow", "sign", "floor", "ceil", "round", "reciprocal", "clip",
    "mean", "softmax", "relu", "sigmoid", "tanh", "scale",
    # binary math
    "elementwise_add", "elementwise_sub", "elementwise_mul", "elementwise_div", "elementwise_max", "elementwise_min", "elementwise_pow", "elementwise_mod", "elementwise_floordiv", "sums",
    # comparisons and logic
    "equal", "not_equal", "less_than", "less_equal", "greater_than", "greater_equal",
    "logical_and", "logical_or", "logical_xor", "logical_not", "where", "isfinite",
]


def fluid1_one_element(*variables: Variable) -> Variable:
    """Declare the 0-d results ``variables`` shape ``[1]``, as Fluid 1.x's ops computed them
    (Fluid 1.8's mean, reduce with reduce_all and accuracy set their output dims to ``{1}``):
    scripts read them as ``np.array(out)[0]`` or ``out.shape == (1,)``. The declaration is the
    mechanism: shape inference keeps a declared ``[1]`` (``ir.shape.one_element_shape``) and the
    lowering gives the value that shape, so a Paddle 2.x program's bytes (declared ``[]``) keep
    their 0-d results. Returns the first variable."""
    for var in variables:
        if var.shape == ():
            var.shape = (1,)
    return variables[0]


def mean(x: Variable, name: str | None = None) -> Variable:
    """The mean of all elements, shape [1] (Fluid 1.x's; see :func:`fluid1_one_element`)."""
    return fluid1_one_element(LayerHelper("mean", name).simple_op("mean", {"X": x}))


def softmax(input: Variable, use_cudnn: bool = False, name: str | None = None, axis: int = -1) -> Variable:
    """Softmax along ``axis`` (Fluid 1.8's arguments; ``use_cudnn`` has no effect)."""
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


def scale(x: Variable, scale: float = 1.0, bias: float = 0.0, bias_after_scale: bool = True,
          activation=None, name: str | None = None) -> Variable:
    """scale * x + bias (Fluid 1.8's arguments: ``act=`` after ``bias_after_scale``)."""
    helper = LayerHelper("scale", name)
    out = helper.simple_op(
        "scale", {"X": x}, {"scale": float(scale), "bias": float(bias), "bias_after_scale": bias_after_scale})
    return activate(out, activation, helper)


def _out(helper: LayerHelper, out: Variable | None, dtype: str, stop_gradient: bool = False) -> Variable:
    return out if out is not None else helper.create_tmp(dtype, stop_gradient=stop_gradient)


# -- reductions ----------------------------------------------------------------------------------
def _reduce_layer(op_type: str, what: str):
    def layer(input: Variable, dim: int | Sequence[int] | None = None, keep_dim: bool = False,
              name: str | None = None) -> Variable:
        dims = [] if dim is None else [int(dim)] if isinstance(dim, int) else [int(d) for d in dim]
        reduce_all = not dims or len(dims) == input.ndim
        return fluid1_one_element(LayerHelper(op_type, name).simple_op(
            op_type, {"X": input}, {"dim": dims, "keep_dim": bool(keep_dim), "reduce_all": reduce_all}))

    layer.__name__ = op_type
    layer.__doc__ = (
        f"The {what} of ``input`` over ``dim`` (an int or a list; None: every dim).\n\n"
        "Reduced dims are dropped unless ``keep_dim``; reducing every dim without ``keep_dim`` gives "
        f"shape [1] (Fluid 1.x's).\n\n>>> {op_type}(x, dim=[1, 2], keep_dim=True)   # x (-1, 3, 4) -> (-1, 1, 1)")
    return layer


reduce_sum = _reduce_layer("reduce_sum", "sum (bool/int32 inputs sum to int64)")
reduce_mean = _reduce_layer("reduce_mean", "mean")
reduce_max = _reduce_layer("reduce_max", "maximum")
reduce_min = _reduce_layer("reduce_min", "minimum")
reduce_prod = _reduce_layer("reduce_prod", "product")


def _arg_layer(op_type: str, layer_name: str, what: str):
    def layer(x: Variable, axis: int = 0, keepdims: bool = False, name: str | None = None) -> Variable:
        helper = LayerHelper(layer_name, name)
        out = helper.create_tmp("int64", stop_gradient=True)
        helper.append_op(op_type, {"X": x}, {"Out": out}, {"axis": int(axis), "keepdims": bool(keepdims)})
        return out

    layer.__name__ = layer_name
    layer.__doc__ = (f"The index (int64) of the first {what} element of ``x`` along ``axis``; no gradient.\n\n"
                     f">>> {layer_name}(x, axis=1)   # x (-1, 10) -> (-1,)")
    return layer


argmax = _arg_layer("arg_max", "argmax", "largest")
argmin = _arg_layer("arg_min", "argmin", "smallest")


def topk(input: Variable, k: int | Variable, name: str | None = None) -> tuple[Variable, Variable]:
    """The ``k`` largest entries of ``input`` along its last dim, descending, and their int64 indices.

    The gradient flows to ``input`` through the values. ``k`` may be a one-element int Variable only
    when its value is known when the program is compiled (XLA needs static shapes); prefer an int.

    >>> values, indices = topk(x, k=5)   # x (-1, 10) -> (-1, 5), (-1, 5)
    """
    helper = LayerHelper("top_k", name)
    values = helper.create_tmp(input.dtype)
    indices = helper.create_tmp("int64", stop_gradient=True)
    inputs = {"X": input}
    attrs = {}
    if isinstance(k, Variable):
        inputs["K"] = k
    else:
        attrs["k"] = int(k)
    helper.append_op("top_k", inputs, {"Out": values, "Indices": indices}, attrs)
    return values, indices


def cumsum(x: Variable, axis: int | None = None, exclusive: bool | None = None, reverse: bool | None = None,
           name: str | None = None) -> Variable:
    """Running sums of ``x`` along ``axis`` (default: the last dim).

    ``exclusive`` leaves each element out of its own sum; ``reverse`` sums from the end.

    >>> cumsum(x, axis=1, reverse=True)
    """
    attrs = {"axis": -1 if axis is None else int(axis)}
    if exclusive is not None:
        attrs["exclusive"] = bool(exclusive)
    if reverse is not None:
        attrs["reverse"] = bool(reverse)
    return LayerHelper("cumsum", name).simple_op("cumsum", {"X": x}, attrs)


# -- activations and unary math --------------------------------------------------------------------
def _unary(op_type: str, doc: str):
    def layer(x: Variable, name: str | None = None) -> Variable:
        return LayerHelper(op_type, name).simple_op(op_type, {"X": x})

    layer.__name__ = op_type
    layer.__doc__ = doc
    return layer


silu = _unary("silu", "x * sigmoid(x).")
softsign = _unary("softsign", "x / (1 + |x|).")
exp = _unary("exp", "e ** x.")
log = _unary("log", "Natural logarithm of x.")
sqrt = _unary("sqrt", "Square root of x.")
rsqrt = _unary("rsqrt", "1 / sqrt(x).")
abs = _unary("abs", "|x|.")  # noqa: A001  (fluid.layers' name)
square = _unary("square", "x * x.")
sign = _unary("sign", "-1, 0 or 1 by the sign of x (gradient 0).")
floor = _unary("floor", "Largest integer <= x (gradient 0).")
ceil = _unary("ceil", "Smallest integer >= x (gradient 0).")
round = _unary("round", "x rounded to the nearest integer, halves away from zero (gradient 0).")  # noqa: A001
reciprocal = _unary("reciprocal", "1 / x.")


def relu6(x: Variable, threshold: float = 6.0, name: str | None = None) -> Variable:
    """min(max(x, 0), threshold).

    Paddle 2.6 fixes the threshold at 6 and writes no attribute; a different ``threshold`` is
    stored as Paddle 1.x did (fluidjax honours it, Paddle 2.6 would not).
    """
    attrs = {} if float(threshold) == 6.0 else {"threshold": float(threshold)}
    return LayerHelper("relu6", name).simple_op("relu6", {"X": x}, attrs)


def leaky_relu(x: Variable, alpha: float = 0.02, name: str | None = None) -> Variable:
    """x where x > 0, else alpha * x."""
    return LayerHelper("leaky_relu", name).simple_op("leaky_relu", {"X": x}, {"alpha": float(alpha)})


def elu(x: Variable, alpha: float = 1.0, name: str | None = None) -> Variable:
    """x where x > 0, else alpha * (exp(x) - 1)."""
    return LayerHelper("elu", name).simple_op("elu", {"X": x}, {"alpha": float(alpha)})


def gelu(x: Variable, approximate: bool = False, name: str | None = None) -> Variable:
    """x * Phi(x) with the Gaussian CDF Phi (erf form), or its tanh approximation."""
    return LayerHelper("gelu", name).simple_op("gelu", {"X": x}, {"approximate": bool(approximate)})


def swish(x: Variable, beta: float = 1.0, name: str | None = None) -> Variable:
    """x * sigmoid(beta * x).

    Paddle 2.6's ``swish`` has no ``beta`` (it is always 1); a different ``beta`` is stored as
    Paddle 1.x did (fluidjax honours it, Paddle 2.6 would not).
    """
    attrs = {} if float(beta) == 1.0 else {"beta": float(beta)}
    return LayerHelper("swish", name).simple_op("swish", {"X": x}, attrs)


def hard_swish(x: Variable, threshold: float = 6.0, scale: float = 6.0, offset: float = 3.0,
               name: str | None = None) -> Variable:
    """x * min(max(x + offset, 0), threshold) / scale (Paddle 2.6's kernel uses only the defaults)."""
    return LayerHelper("hard_swish", name).simple_op(
        "hard_swish", {"X": x}, {"threshold": float(threshold), "scale": float(scale), "offset": float(offset)})


def hard_sigmoid(x: Variable, slope: float = 0.2, offset: float = 0.5, name: str | None = None) -> Variable:
    """min(max(slope * x + offset, 0), 1)."""
    return LayerHelper("hard_sigmoid", name).simple_op(
        "hard_sigmoid", {"X": x}, {"slope": float(slope), "offset": float(offset)})


def softplus(x: Variable, beta: float = 1.0, threshold: float = 20.0, name: str | None = None) -> Variable:
    """log(1 + exp(beta * x)) / beta, and x itself where beta * x > threshold."""
    return LayerHelper("softplus", name).simple_op(
        "softplus", {"X": x}, {"beta": float(beta), "threshold": float(threshold)})


def pow(x: Variable, factor: float | Variable = 1.0, name: str | None = None) -> Variable:  # noqa: A001
    """x ** factor; ``factor`` may be a one-element float Variable (no gradient flows to it)."""
    helper = LayerHelper("pow", name)
    if isinstance(factor, Variable):
        return helper.simple_op("pow", {"X": x, "FactorTensor": factor})
    return helper.simple_op("pow", {"X": x}, {"factor": float(factor)})


def clip(x: Variable, min: float, max: float, name: str | None = None) -> Variable:  # noqa: A002
    """x limited to [min, max]; the gradient passes only strictly inside.

    >>> clip(x, -1.0, 1.0)
    """
    if float(min) > float(max):
        raise ValueError(f"clip: min ({min}) must not exceed max ({max})")
    return LayerHelper("clip", name).simple_op("clip", {"X": x}, {"min": float(min), "max": float(max)})


# -- binary math -------------------------------------------------------------------------------------
def _elementwise(op_type: str, doc: str):
    def layer(x: Variable, y: Variable, axis: int = -1, activation=None, name: str | None = None) -> Variable:
        helper = LayerHelper(op_type, name)
        return activate(helper.simple_op(op_type, {"X": x, "Y": y}, {"axis": int(axis)}), activation, helper)

    layer.__name__ = op_type
    layer.__doc__ = (f"{doc}\n\n``y`` broadcasts against ``x`` like NumPy (``axis=-1``) or, with ``axis``, "
                     "lines up with x's dims from ``axis`` on (Paddle's rule). Optional ``activation``.")
    return layer


elementwise_add = _elementwise("elementwise_add", "x + y elementwise.")
elementwise_sub = _elementwise("elementwise_sub", "x - y elementwise.")
elementwise_mul = _elementwise("elementwise_mul", "x * y elementwise.")
elementwise_div = _elementwise("elementwise_div", "x / y elementwise.")
elementwise_max = _elementwise("elementwise_max", "max(x, y) elementwise (on ties the gradient goes to y).")
elementwise_min = _elementwise("elementwise_min", "min(x, y) elementwise (on ties the gradient goes to y).")
elementwise_pow = _elementwise("elementwise_pow", "x ** y elementwise.")
elementwise_mod = _elementwise("elementwise_mod", "x mod y with the sign of y (Python's %); no gradient.")
elementwise_floordiv = _elementwise("elementwise_floordiv", "floor(x / y) (Python's //); no gradient.")


def sums(input: Sequence[Variable], out: Variable | None = None) -> Variable:
    """The elementwise sum of a list of Variables of one shape and dtype (a ``sum`` op).

    >>> total = sums([a, b, c])
    """
    input = list(input)
    if not input:
        raise ValueError("sums: needs at least one Variable")
    helper = LayerHelper("sum")
    out = _out(helper, out, input[0].dtype)
    helper.append_op("sum", {"X": input}, {"Out": out})
    return out


# -- comparisons and logic -------------------------------------------------------------------------
def _compare(op_type: str, symbol: str):
    def layer(x: Variable, y: Variable, cond: Variable | None = None, name: str | None = None) -> Variable:
        helper = LayerHelper(op_type, name)
        out = _out(helper, cond, "bool", stop_gradient=True)
        helper.append_op(op_type, {"X": x, "Y": y}, {"Out": out})
        return out

    layer.__name__ = op_type
    layer.__doc__ = (f"x {symbol} y elementwise, a bool Variable (NumPy broadcasting; no gradient).\n\n"
                     "``cond``, when given, is the Variable the result is written to.")
    return layer


equal = _compare("equal", "==")
not_equal = _compare("not_equal", "!=")
_less_than = _compare("less_than", "<")


def less_than(x: Variable, y: Variable, force_cpu=None, cond: Variable | None = None,
              name: str | None = None) -> Variable:
    """x < y elementwise, a bool Variable (NumPy broadcasting; no gradient); Fluid 1.8's
    arguments (``force_cpu`` has no effect: XLA places it). ``cond``, when given, is the Variable
    the result is written to."""
    return _less_than(x, y, cond, name)
less_equal = _compare("less_equal", "<=")
greater_than = _compare("greater_than", ">")
greater_equal = _compare("greater_equal", ">=")


def _logical(op_type: str, word: str):
    def layer(x: Variable, y: Variable, out: Variable | None = None, name: str | None = None) -> Variable:
        helper = LayerHelper(op_type, name)
        result = _out(helper, out, "bool", stop_gradient=True)
        helper.append_op(op_type, {"X": x, "Y": y}, {"Out": result})
        return result

    layer.__name__ = op_type
    layer.__doc__ = (f"x {word} y elementwise, a bool Variable (NumPy broadcasting; non-bool inputs count as "
                     "x != 0). ``out``, when given, receives the result.")
    return layer


logical_and = _logical("logical_and", "and")
logical_or = _logical("logical_or", "or")
logical_xor = _logical("logical_xor", "xor")


def logical_not(x: Variable, out: Variable | None = None, name: str | None = None) -> Variable:
    """not x elementwise, a bool Variable."""
    helper = LayerHelper("logical_not", name)
    result = _out(helper, out, "bool", stop_gradient=True)
    helper.append_op("logical_not", {"X": x}, {"Out": result})
    return result


def where(condition: Variable, x: Variable | None = None, y: Variable | None = None,
          name: str | None = None) -> Variable:
    """x where ``condition`` (bool) holds, else y; all three of one shape. Gradients flow to x and y.

    (Paddle 1.x's one-argument ``where(condition)``, which returns indices, is not supported.)

    >>> where(greater_than(a, b), a, b)
    """
    if x is None or y is None:
        raise ValueError("where: give condition, x and y (the index form where(condition) is not supported)")
    return LayerHelper("where", name).simple_op("where", {"Condition": condition, "X": x, "Y": y})


def isfinite(x: Variable, name: str | None = None) -> Variable:
    """Whether each element of x is finite (neither inf nor NaN): a bool Variable of x's shape.

    (Paddle 2.x semantics, op ``isfinite_v2``; Paddle 1.x's ``isfinite`` gave one bool for the whole
    tensor.)
    """
    helper = LayerHelper("isfinite", name)
    out = helper.create_tmp("bool", stop_gradient=True)
    helper.append_op("isfinite_v2", {"X": x}, {"Out": out})
    return out
