"""How every layer reads its arguments: Fluid's keyword spellings and the activation table.

One rule for the whole layer API, applied by :func:`~.layer_helper.atomic_layer` (every public
layer goes through it): a keyword in Fluid's spelling (``act=``, ``size=``) is the seeds'
spelling (``activation=``, ``output_size=``) when the layer takes the seeds' name and not
Fluid's; giving both spellings is an error. ``activation=`` names an elementwise op
(``"relu"``) from the op registry — the one activation table — or is a layer function.
"""

from __future__ import annotations

import functools
import inspect
from typing import TYPE_CHECKING, Callable

from ..ir import registry

if TYPE_CHECKING:
    from ..ir.variable import Variable
    from .layer_helper import LayerHelper

# Fluid 1.x's keyword -> the seeds' keyword.
FLUID_SPELLINGS = {"act": "activation", "size": "output_size"}


def with_fluid_spellings(fn: Callable) -> Callable:
    """``fn`` also accepting Fluid's spelling of each keyword it takes in the seeds' spelling."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return fn
    renames = {fluid: seeds for fluid, seeds in FLUID_SPELLINGS.items() if seeds in params and fluid not in params}
    if not renames:
        return fn

    @functools.wraps(fn)
    def layer(*args, **kwargs):
        for fluid, seeds in renames.items():
            if fluid in kwargs:
                if seeds in kwargs:
                    raise ValueError(f"{fn.__name__}: give {seeds}= or Fluid's {fluid}=, not both")
                kwargs[seeds] = kwargs.pop(fluid)
        return fn(*args, **kwargs)

    return layer


def is_activation(op_type: str) -> bool:
    """An op usable as ``activation=``: registered, one input X, one output Out, differentiable."""
    if not registry.has(op_type):
        return False
    opdef = registry.get(op_type)
    return ([s.name for s in opdef.inputs] == ["X"] and [s.name for s in opdef.outputs] == ["Out"]
            and opdef.forward_type is None and opdef.grad is not None)


def activate(x: "Variable", activation, helper: "LayerHelper") -> "Variable":
    """Apply ``activation``: a layer function, or the name of an elementwise op (``"relu"``)."""
    if activation is None:
        return x
    if callable(activation):
        return activation(x)
    if not isinstance(activation, str) or not is_activation(activation):
        known = sorted(t for t in registry.registered_types() if is_activation(t))
        raise ValueError(f"unknown activation {activation!r}; use a layer function or one of {known}")
    return helper.simple_op(activation, {"X": x})
