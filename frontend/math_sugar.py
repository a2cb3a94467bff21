"""Operators on symbolic Variables: ``a + b`` appends ``elementwise_add``, ``a * 2`` a ``scale`` op,
``a < b`` a ``less_than`` op (a bool Variable).

Installed onto :class:`fluidjax.ir.Variable` at import (the IR stays free of layer code). The ops
go to the current block of the left Variable's own program (as in Paddle), and an operator that
fails leaves the program as it was (see ``atomic_layer``).

Comparisons follow Paddle 2.x's static ``Variable``: ``==``, ``!=``, ``<``, ``<=``, ``>``, ``>=``
with a Variable or a Python number on either side append ``equal`` / ``not_equal`` /
``less_than`` / ``less_equal`` / ``greater_than`` / ``greater_equal`` and return the bool
Variable. Hashing stays by identity (``__hash__ = object.__hash__``), so Variables still work as
dict keys and set members — but ``v in some_list``, ``list.index(v)`` and ``list.remove(v)``
compare with ``==``: code that searches lists of Variables must compare identities
(``any(v is w for w in ws)``) or names.

A NumPy array (or a list) on either side is refused with a :class:`SymbolicValueError` that says
what to do instead: NumPy must not turn the Variable into an array (it has no value), and a
hidden constant the size of the array would bloat the program. ``Variable.__array_ufunc__ = None``
makes ``np_array + var`` reach ``Variable.__radd__`` instead of NumPy's ufunc machinery.
"""

from __future__ import annotations

import numbers
from builtins import slice as builtins_slice

from ..ir import program as ir_program
from ..ir.errors import SymbolicValueError
from ..ir.variable import Variable
from . import layers
from .layer_helper import LayerHelper, atomic_layer


def _sugar(fn):
    """An operator method: atomic like a layer call, and building into the program of the
    Variable on the left (``self``) — as Paddle does — even outside its ``program_guard``."""

    def method(self: Variable, other=None):
        program = self.block.program
        if program is ir_program._main_program:
            return fn(self, other)
        previous = ir_program.switch_main_program(program)
        try:
            return fn(self, other)
        finally:
            ir_program.switch_main_program(previous)

    return atomic_layer(method)


def _scale(x: Variable, scale: float = 1.0, bias: float = 0.0) -> Variable:
    return layers.scale(x, scale=scale, bias=bias)


def _constant_like(x: Variable, value) -> Variable:
    return layers.fill_constant([1], x.dtype, value)


def _refuse_value(var: Variable, other, symbol: str, reverse: bool = False):
    cls = type(other)
    kind = cls.__name__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__name__}"
    expr = f"a {kind} {symbol} Variable {var.name!r}" if reverse else f"Variable {var.name!r} {symbol} a {kind}"
    raise SymbolicValueError(
        f"cannot compute {expr}: a Variable is symbolic (it has no "
        "value while the program is built) and an array is a value. Make the value a Variable "
        "first: fj.layer.fill_constant(shape, dtype, value) for a constant, or a data variable "
        "(fj.layer.data) that you feed at run time; or use a Python number, which works on "
        "either side.")


def _as_left_dtype(left: Variable, right: Variable) -> Variable:
    """``right`` cast to ``left``'s dtype where they differ: Fluid's operator rule
    (``math_op_patch``), so ``float_var - int_var`` is a float subtraction."""
    if left.dtype is None or right.dtype is None or left.dtype == right.dtype:
        return right
    return layers.cast(right, left.dtype)


def _is_array_like(value) -> bool:
    return isinstance(value, (list, tuple)) or hasattr(value, "__array__") or hasattr(value, "__array_interface__")


def _binary(op_type: str, symbol: str, scalar_forward, scalar_reverse):
    layer = getattr(layers, op_type)

    @_sugar
    def forward(self: Variable, other):
        if isinstance(other, Variable):
            return layer(self, _as_left_dtype(self, other))
        if isinstance(other, numbers.Number):
            return scalar_forward(self, float(other))
        if _is_array_like(other):
            _refuse_value(self, other, symbol)
        return NotImplemented

    @_sugar
    def reverse(self: Variable, other):
        if isinstance(other, numbers.Number):
            return scalar_reverse(self, float(other))
        if _is_array_like(other):
            _refuse_value(self, other, symbol, reverse=True)
        return NotImplemented

    return forward, reverse


_OPERATORS = {
    "add": _binary("elementwise_add", "+", lambda x, c: _scale(x, 1.0, c), lambda x, c: _scale(x, 1.0, c)),
    "sub": _binary("elementwise_sub", "-", lambda x, c: _scale(x, 1.0, -c), lambda x, c: _scale(x, -1.0, c)),
    "mul": _binary("elementwise_mul", "*", lambda x, c: _scale(x, c), lambda x, c: _scale(x, c)),
    "truediv": _binary("elementwise_div", "/", lambda x, c: _scale(x, 1.0 / c),
                       lambda x, c: layers.elementwise_div(_constant_like(x, c), x)),
}


def _comparison(layer_name: str, symbol: str):
    """``self <symbol> other`` as a compare op; Python swaps the operands itself for a number on
    the left (``3 < v`` calls ``v.__gt__(3)``)."""
    layer = getattr(layers, layer_name)

    @_sugar
    def compare(self: Variable, other):
        if isinstance(other, Variable):
            return layer(self, _as_left_dtype(self, other))
        if isinstance(other, numbers.Number):
            return layer(self, _constant_like(self, other))
        if _is_array_like(other):
            _refuse_value(self, other, symbol)
        return NotImplemented  # `v == None`, `v == "x"`: Python falls back to identity (False)

    return compare


_COMPARISONS = {
    "eq": ("equal", "=="), "ne": ("not_equal", "!="), "lt": ("less_than", "<"),
    "le": ("less_equal", "<="), "gt": ("greater_than", ">"), "ge": ("greater_equal", ">="),
}


_INT_MAX = 2 ** 31 - 1


def _getitem(self: Variable, item):
    """``var[index]``: ints, slices (with a step: ``strided_slice``), ``...`` and ``None`` (a new
    dim of 1), as Fluid's and Paddle 2's static ``Variable.__getitem__``: one ``slice`` op whose
    ``decrease_axis`` drops the dims an int picks (all of them: a 0-d result, as in Paddle 2.6),
    then ``unsqueeze`` for ``None``. ``layers.shape(x)[1]`` is the usual use."""
    items = list(item) if isinstance(item, tuple) else [item]
    if sum(i is Ellipsis for i in items) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if any(not (i is None or i is Ellipsis or isinstance(i, (int, builtins_slice))) or isinstance(i, bool)
           for i in items):
        raise TypeError(f"Variable {self.name!r}: index {item!r} is not supported; index with ints, slices, "
                        "'...' and None (layers.gather takes a Variable of indices)")
    real = [i for i in items if i is not None and i is not Ellipsis]
    if len(real) > self.ndim:
        raise IndexError(f"too many indices for Variable {self.name!r} of shape {self.shape}")
    if Ellipsis in items:
        at = items.index(Ellipsis)
        items = items[:at] + [builtins_slice(None)] * (self.ndim - len(real)) + items[at + 1:]
    axes, starts, ends, strides, decrease = [], [], [], [], []
    dim = 0
    for i in items:
        if i is None:
            continue
        if isinstance(i, int):
            size = self.shape[dim]
            if size >= 0 and not -size <= i < size:
                raise IndexError(f"index {i} is out of range for dim {dim} of Variable {self.name!r} {self.shape}")
            axes.append(dim), starts.append(i), ends.append(i + 1 if i != -1 else _INT_MAX), strides.append(1)
            decrease.append(dim)
        elif i != builtins_slice(None):
            step = 1 if i.step is None else int(i.step)
            if step == 0:
                raise ValueError("slice step cannot be zero")
            start = i.start if i.start is not None else (0 if step > 0 else _INT_MAX)
            stop = i.stop if i.stop is not None else (_INT_MAX if step > 0 else -_INT_MAX)
            axes.append(dim), starts.append(int(start)), ends.append(int(stop)), strides.append(step)
        dim += 1
    out = self
    if axes:
        helper = LayerHelper("slice")
        out = helper.create_tmp(self.dtype, stop_gradient=self.stop_gradient)
        inputs = {"Input": self, "StartsTensor": [], "EndsTensor": [], "StartsTensorList": [], "EndsTensorList": []}
        attrs = {"axes": axes, "starts": starts, "ends": ends, "infer_flags": [1] * len(axes),
                 "decrease_axis": decrease}
        if all(s == 1 for s in strides):
            helper.append_op("slice", inputs, {"Out": out}, attrs)
        else:
            inputs.update(StridesTensor=[], StridesTensorList=[])
            helper.append_op("strided_slice", inputs, {"Out": out}, {**attrs, "strides": strides})
    if any(i is None for i in items):
        # each None's position in the result: after the dims kept before it
        positions, seen = [], 0
        for i in items:
            if i is None:
                positions.append(seen)
                seen += 1
            elif not isinstance(i, int):
                seen += 1
        out = layers.unsqueeze(out, positions)
    return out


def install() -> None:
    """Give :class:`Variable` its arithmetic and comparison operators (hashing stays by identity)."""
    for name, (forward, reverse) in _OPERATORS.items():
        forward.__name__, reverse.__name__ = f"__{name}__", f"__r{name}__"
        setattr(Variable, f"__{name}__", forward)
        setattr(Variable, f"__r{name}__", reverse)
    for name, (layer_name, symbol) in _COMPARISONS.items():
        method = _comparison(layer_name, symbol)
        method.__name__ = f"__{name}__"
        method.__doc__ = f"``self {symbol} other``: a ``{layer_name}`` op; returns the bool Variable."
        setattr(Variable, f"__{name}__", method)
    Variable.__hash__ = object.__hash__
    Variable.__getitem__ = _sugar(_getitem)
    Variable.__neg__ = _sugar(lambda self, _: _scale(self, -1.0))
    astype = _sugar(lambda self, dtype: layers.cast(self, dtype))
    astype.__name__ = "astype"
    astype.__doc__ = ("``self`` cast to ``dtype`` (a ``cast`` op), Fluid 1.x's ``Variable.astype`` "
                      "(``layers.argmax(x, 1).astype('int32')``).")
    Variable.astype = astype


install()
