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

# Keywords Fluid 1.x layers took that select a kernel or a placement (``fc(is_test=True)`` of Fluid
# 1.3, ``use_mkldnn``, ``use_cudnn``, ``force_cpu``): XLA compiles the whole step, so a layer that
# does not take one itself accepts it and it changes nothing. A layer whose result depends on it
# (``dropout(is_test=)``, ``batch_norm(is_test=)``) takes it as its own parameter.
FLUID_KERNEL_KEYWORDS = frozenset({"is_test", "use_mkldnn", "use_cudnn", "force_cpu"})


def with_fluid_spellings(fn: Callable) -> Callable:
    """``fn`` also accepting Fluid's spelling of each keyword it takes in the seeds' spelling."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return fn
    renames = {fluid: seeds for fluid, seeds in FLUID_SPELLINGS.items() if seeds in params and fluid not in params}
    takes_any = any(p.kind == p.VAR_KEYWORD for p in params.values())
    ignored = frozenset() if takes_any else frozenset(k for k in FLUID_KERNEL_KEYWORDS if k not in params)
    if not renames and not ignored:
        return fn
    return with_fluid_keywords(renames, ignored)(fn)


def with_fluid_keywords(renames: dict[str, str], ignored: frozenset = frozenset()) -> Callable[[Callable], Callable]:
    """A decorator: the function also takes each keyword ``fluid`` of ``renames`` (Fluid 1.x's
    name of a parameter) as its own ``renames[fluid]``; giving both is an error. Keywords in
    ``ignored`` are accepted and dropped. The wrapper's ``__fluid_renames__`` /
    ``__fluid_ignored__`` record both (tests compare signatures with Fluid 1.8's through them).

    >>> @with_fluid_keywords({"dirname": "path_prefix"})
    ... def save(path_prefix): return path_prefix
    >>> save(dirname="out")
    'out'
    """

    def decorate(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def call(*args, **kwargs):
            for name in ignored.intersection(kwargs):
                del kwargs[name]
            for fluid, ours in renames.items():
                if fluid in kwargs:
                    if ours in kwargs:
                        raise ValueError(f"{fn.__name__}: give {ours}= or Fluid's {fluid}=, not both")
                    kwargs[ours] = kwargs.pop(fluid)
            return fn(*args, **kwargs)

        call.__fluid_renames__ = {**getattr(fn, "__fluid_renames__", {}), **renames}
        call.__fluid_ignored__ = getattr(fn, "__fluid_ignored__", frozenset()) | ignored
        return call

    return decorate


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


def shape_arguments(shape, layer: str, helper: "LayerHelper", *, tensor_slot: str = "ShapeTensor",
                    list_slot: str = "ShapeTensorList") -> tuple[list[int], dict]:
    """A shape argument as Fluid 1.8 passes it to a shape-taking op (``utils._convert_shape_to_list``
    / ``get_shape_tensor_inputs``): ``(attribute, tensor inputs)``.

    - Python ints: the attribute, no tensor inputs;
    - one int Variable (``layers.shape(x)``): ``tensor_slot`` holds it, the attribute is -1 per entry;
    - a list mixing ints and 1-element Variables (``[layers.shape(x)[0], 1]``): ``list_slot`` holds
      one int32 tensor per entry (ints become ``fill_constant`` tensors), the attribute has -1 where
      a Variable is.

    The lowering reads the tensors (``_tensor_attrs.static_ints``); values computed from shapes are
    concrete while the step is traced (constant folding), so XLA's shapes stay static.
    """
    from ..ir.variable import Variable

    if isinstance(shape, Variable) and shape.ndim == 0 and shape.dtype in ("int32", "int64"):
        # one int (``layers.shape(x)[0]``, which Fluid 1.x made [1]): a shape of one dim
        return [-1], {tensor_slot: shape}
    if isinstance(shape, Variable):
        if shape.ndim != 1 or shape.shape[0] < 0:
            raise TypeError(f"{layer}: a shape given as a Variable must be 1-D with a known length, "
                            f"got {shape.name!r} {shape.shape}")
        if shape.dtype not in ("int32", "int64"):
            raise TypeError(f"{layer}: a shape Variable must be int32 or int64, got {shape.dtype}")
        return [-1] * shape.shape[0], {tensor_slot: shape}
    shape = list(shape) if isinstance(shape, (list, tuple)) else [shape]
    if not any(isinstance(d, Variable) for d in shape):
        return [int(d) for d in shape], {}
    attr, tensors = [], []
    for d in shape:
        if isinstance(d, Variable):
            if d.ndim > 1 or (d.ndim == 1 and d.shape[0] not in (1, -1)):
                raise TypeError(f"{layer}: a Variable inside a shape list must hold one value, got "
                                f"{d.name!r} {d.shape}")
            if d.dtype not in ("int32", "int64"):
                raise TypeError(f"{layer}: a Variable inside a shape list must be int32 or int64, got {d.dtype}")
            if d.dtype != "int32":
                cast = helper.create_tmp("int32", stop_gradient=True, shape=(1,))
                helper.append_op("cast", {"X": d}, {"Out": cast}, {"in_dtype": 3, "out_dtype": 2})
                d = cast
            attr.append(-1)
            tensors.append(d)
        else:
            attr.append(int(d))
            const = helper.create_tmp("int32", stop_gradient=True, shape=(1,))
            helper.append_op("fill_constant", outputs={"Out": const},
                             attrs={"shape": [1], "dtype": 2, "value": float(int(d)), "str_value": str(int(d)),
                                    "force_cpu": True})
            tensors.append(const)
    return attr, {list_slot: tensors}
