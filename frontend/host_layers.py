"""Fluid 1.8's layers that run Python on the host during a run: ``Print`` (op ``print``) and
``py_func`` (op ``py_func``); both are host callbacks inside the compiled step
(``lowering/ops/callback.py``).

>>> x = Print(x, message="after fc", summarize=5)        # prints x each time the step runs
>>> out = main.current_block().create_var(name="out", shape=[-1, 4], dtype="float32")
>>> py_func(lambda a: np.tanh(a), x, out, backward_func=lambda a, y, dy: dy * (1 - y * y))

A program holding ``py_func`` stores its functions' numbers in this process's registry, as Fluid
did: it runs only in the process that built it, not after serializing and loading elsewhere.
"""

from __future__ import annotations

from typing import Callable, Sequence

from ..ir.variable import Variable
from ..lowering.ops.callback import register_callable
from .layer_helper import LayerHelper

__all__ = ["Print", "py_func"]


def Print(input: Variable, first_n: int = -1, message: str | None = None, summarize: int = 20,  # noqa: N802
          print_tensor_name: bool = True, print_tensor_type: bool = True, print_tensor_shape: bool = True,
          print_tensor_lod: bool = True, print_phase: str = "both") -> Variable:
    """Print ``input`` to stdout whenever the step runs (its first ``first_n`` times when >= 0):
    name, ``message``, LoD, shape, dtype and the first ``summarize`` values (-1: all). ``print_phase``
    'forward', 'backward' (its gradient, printed by the gradient op) or 'both'. Returns a variable
    equal to ``input``. The Executor runs only the ops a fetch (or a state update) needs: use the
    result (``x = Print(x)``) or fetch something computed from it, or nothing is printed
    (docs/fluid1.md)."""
    phase = str(print_phase).upper()
    if phase not in ("FORWARD", "BACKWARD", "BOTH"):
        raise ValueError(f"Print: print_phase must be 'forward', 'backward' or 'both', got {print_phase!r}")
    helper = LayerHelper("print")
    out = helper.create_tmp(input.dtype, lod_level=input.lod_level)
    helper.append_op("print", {"In": input}, {"Out": out},
                     {"first_n": int(first_n), "message": message or "", "summarize": int(summarize),
                      "print_tensor_name": bool(print_tensor_name), "print_tensor_type": bool(print_tensor_type),
                      "print_tensor_shape": bool(print_tensor_shape), "print_tensor_layout": True,
                      "print_tensor_lod": bool(print_tensor_lod), "print_phase": phase, "is_forward": True})
    return out


def _as_list(value) -> list:
    if value is None:
        return []
    return [value] if isinstance(value, Variable) else list(value)


def py_func(func: Callable, x, out, backward_func: Callable | None = None,
            skip_vars_in_backward_input: Variable | Sequence[Variable] | None = None):
    """Run ``func(*x)`` (NumPy arrays in, arrays out) on the host inside the program, writing the
    declared variables ``out`` (their shapes and dtypes must be given). ``backward_func`` receives
    x, out and the gradients of out (less ``skip_vars_in_backward_input``) and returns one gradient
    per x (None for none). Returns ``out``."""
    xs, outs = _as_list(x), _as_list(out)
    for var in outs:
        if not isinstance(var, Variable) or len(var.shape) == 0:
            raise ValueError("py_func: each out must be a Variable with a declared shape")
    skip = set()
    if backward_func is not None and skip_vars_in_backward_input is not None:
        for var in _as_list(skip_vars_in_backward_input):
            if not isinstance(var, Variable) or var.name not in {v.name for v in xs + outs}:
                raise ValueError("py_func: skip_vars_in_backward_input must be variables of x or out")
            skip.add(var.name)
    helper = LayerHelper("py_func")
    helper.append_op("py_func", {"X": xs}, {"Out": outs},
                     {"forward_callable_id": register_callable(func),
                      "backward_callable_id": register_callable(backward_func) if backward_func is not None else -1,
                      "backward_skip_vars": sorted(skip)})
    if backward_func is None:
        for var in outs:
            var.stop_gradient = True
    return out
