"""Python on the host during a run: ``print`` (Fluid's ``layers.Print``) and ``py_func``.

Both lower to JAX host callbacks inside the compiled step: ``print`` to ``jax.debug.callback``
(an effect XLA keeps, run every time the step runs), ``py_func`` to ``jax.pure_callback`` with a
``jax.custom_vjp`` whose backward calls the user's backward function. Each callback also takes the
step's ticket (``effects.traced_ticket``): inside an Executor run, prints are written when the run
commits and a re-run attempt reuses the ``py_func`` results of the first (``lowering/effects.py``).

``py_func`` names its Python functions by number, as Fluid does: ``forward_callable_id`` and
``backward_callable_id`` index :data:`CALLABLES` of the process that built the program. A
serialized program holding a ``py_func`` therefore runs only in that process (Fluid's programs with
``py_func`` were not portable either); the numbers mean nothing elsewhere.
"""

from __future__ import annotations

import itertools
import sys
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from ...ir import dtypes
from ...ir.registry import Attr, op
from ...ir.shape import InferShapeContext, same_as
from .. import effects, paddle_grads
from ..lod_value import LoDValue
from ..lower import lod_aware
from ._errors import _fail

# -- print ----------------------------------------------------------------------------------------
def _format(value, lod, name: str, ctx_attrs: dict, dtype_name: str) -> str:
    """Paddle's TensorFormatter layout: Variable, message, lod, place, shape, dtype, data."""
    lines = []
    if ctx_attrs["print_tensor_name"]:
        lines.append(f"Variable: {name}")
    if ctx_attrs["message"]:
        lines.append(f"  - message: {ctx_attrs['message']}")
    if ctx_attrs["print_tensor_lod"]:
        lines.append("  - lod: {" + "".join("{" + ", ".join(str(int(i)) for i in level) + "}" for level in lod) + "}")
    lines.append("  - place: Place(cpu)")
    if ctx_attrs["print_tensor_shape"]:
        lines.append(f"  - shape: [{', '.join(str(d) for d in value.shape)}]")
    if ctx_attrs["print_tensor_layout"]:
        lines.append("  - layout: NCHW")
    if ctx_attrs["print_tensor_type"]:
        lines.append(f"  - dtype: {dtype_name}")
    flat = value.reshape(-1)
    n = flat.size if ctx_attrs["summarize"] == -1 else min(ctx_attrs["summarize"], flat.size)
    lines.append("  - data: [" + " ".join(f"{v:g}" if flat.dtype.kind == "f" else str(v) for v in flat[:n]) + "]")
    return "\n".join(lines) + "\n"


def _print_grad_maker(op, out_grads, in_grads):
    return [("print", {"In": out_grads["Out"]}, {"Out": in_grads["In"]}, {**op.attrs, "is_forward": False})]


@op("print", inputs="In", outputs="Out",
    attrs={"first_n": -1, "message": "", "summarize": 20, "print_tensor_name": True, "print_tensor_type": True,
           "print_tensor_shape": True, "print_tensor_layout": True, "print_tensor_lod": True,
           "print_phase": "BOTH", "is_forward": True},
    infer_shape=same_as("In"), grad_maker=_print_grad_maker, effect=True)
def print_(ctx):
    """Out = In; prints In on the host (stdout) as the step runs: in the forward pass when
    ``print_phase`` is FORWARD or BOTH, its gradient op (``is_forward`` False) in the backward pass
    when BACKWARD or BOTH; the first ``first_n`` times only (-1: every time); ``summarize`` values
    (-1: all). A LoD input prints its real rows and its LoD (offsets)."""
    x = ctx.input("In")
    phase = str(ctx.attr("print_phase")).upper()
    if phase not in ("FORWARD", "BACKWARD", "BOTH"):
        _fail(ctx, f"print_phase must be FORWARD, BACKWARD or BOTH, got {ctx.attr('print_phase')!r}")
    forward = bool(ctx.attr("is_forward"))
    if phase == "BOTH" or (phase == "FORWARD") == forward:
        attrs = {k: ctx.attr(k) for k in ("message", "summarize", "print_tensor_name", "print_tensor_type",
                                          "print_tensor_shape", "print_tensor_layout", "print_tensor_lod")}
        name = ctx.op.inputs["In"][0]
        first_n = int(ctx.attr("first_n"))
        site = effects.site_of(ctx.op, "print")
        data = x.data if x.__class__ is LoDValue else x
        dtype_name = dtypes.normalize(data.dtype)

        def show(ticket, data, *offsets):
            def text():
                value = np.asarray(data)
                lod = [np.asarray(o) for o in offsets]
                if lod:
                    value = value[:int(lod[-1][-1])]
                return _format(value, lod, name, attrs, dtype_name)
            effects.emit_print(np.asarray(ticket), site, first_n, text)

        jax.debug.callback(show, effects.traced_ticket(), data, *(x.offsets if x.__class__ is LoDValue else ()),
                           ordered=True)
    return {"Out": x}


# -- py_func --------------------------------------------------------------------------------------
#: The Python functions of py_func ops, by the number a program's op stores.
CALLABLES: list[Callable] = []


def register_callable(fn: Callable) -> int:
    """The number a ``py_func`` op stores for ``fn`` (Fluid's PyFuncRegistry)."""
    CALLABLES.append(fn)
    return len(CALLABLES) - 1


def _callable(ctx, attr: str) -> Callable:
    i = int(ctx.attr(attr))
    if not 0 <= i < len(CALLABLES):
        _fail(ctx, f"{attr} {i} names no Python function of this process: a program with py_func runs only in "
                   "the process that built it (docs/fluid1.md)")
    return CALLABLES[i]


def _py_func_shape(ctx: InferShapeContext) -> None:
    # The outputs keep the shapes and dtypes their variables were declared with (Fluid asks users to
    # give them: the function is opaque).
    for i, name in enumerate(ctx.op.outputs.get("Out", [])):
        info = ctx._info(name)
        ctx.check(len(info.shape) > 0, f"py_func's output {name!r} needs a declared shape")
        ctx.set_output("Out", info.shape, info.dtype, info.lod_level, index=i)


def _host_array(value, struct):
    arr = np.asarray(value)
    if arr.shape != struct.shape:
        raise ValueError(f"py_func: the function returned shape {arr.shape}, the output is declared {struct.shape}")
    return arr.astype(struct.dtype, copy=False)


@op("py_func", inputs="X*", outputs="Out*",
    attrs={"forward_callable_id": -1, "backward_callable_id": -1, "backward_skip_vars": Attr("strings", [])},
    infer_shape=_py_func_shape, effect=True)
def py_func(ctx):
    """Out = func(*X) on the host (``jax.pure_callback``: the function must be pure). A declared
    -1 dim of an output takes X[0]'s size at that dim. The gradient calls the backward function with
    X, Out and the Out gradients (less ``backward_skip_vars``) and takes one gradient per X (None:
    zeros); without a backward function no gradient flows."""
    xs = ctx.inputs("X")
    func = _callable(ctx, "forward_callable_id")
    out_vars = list(itertools.takewhile(lambda v: v is not None, (ctx.out_var("Out", i) for i in itertools.count())))
    structs = []
    for var in out_vars:
        shape = [d if d >= 0 else (xs[0].shape[k] if xs and k < xs[0].ndim else _fail(
            ctx, f"output {var.name!r} has an unknown dim {k} and no input to take it from")) for k, d in
            enumerate(var.shape)]
        structs.append(jax.ShapeDtypeStruct(tuple(shape), dtypes.to_numpy(var.dtype)))

    # A call is known by its op (a grad op's recomputed forward is a call of its own) and inputs.
    site = effects.site_of(ctx.op, "py_func")

    def host_forward(ticket, *arrays):
        def call():
            result = func(*arrays)
            result = [] if result is None else list(result) if isinstance(result, (list, tuple)) else [result]
            if len(result) != len(structs):
                raise ValueError(f"py_func: the function returned {len(result)} values for {len(structs)} outputs")
            return [_host_array(r, s) for r, s in zip(result, structs)]
        return effects.call_once(np.asarray(ticket), site, arrays, call,
                                 lambda: [np.zeros(s.shape, s.dtype) for s in structs])

    def forward(ticket, *arrays):
        return tuple(jax.pure_callback(host_forward, structs, ticket, *arrays))

    ticket = effects.traced_ticket()
    if int(ctx.attr("backward_callable_id")) < 0:
        return {"Out": [jax.lax.stop_gradient(o) for o in forward(ticket, *xs)]}
    call_backward = _backward_call(ctx, xs, [v.name for v in out_vars], site)

    # The ticket is an argument (an integer: its cotangent is float0), not a closed-over tracer.
    @jax.custom_vjp
    def run(ticket, *arrays):
        return forward(ticket, *arrays)

    def run_fwd(ticket, *arrays):
        outs = forward(ticket, *arrays)
        return outs, (ticket, arrays, outs)

    def run_bwd(res, douts):
        ticket, arrays, outs = res
        return (np.zeros(ticket.shape, jax.dtypes.float0),) + call_backward(ticket, arrays, outs, douts)

    run.defvjp(run_fwd, run_bwd)
    return {"Out": list(run(ticket, *xs))}


def _backward_call(ctx, xs, out_names, site):
    """``call(ticket, xs, outs, douts)``: the gradients of ``xs`` from the op's backward function
    (called with X, Out and the Out gradients, less ``backward_skip_vars``) on the host; float0
    zeros for inputs that are not floats."""
    backward = _callable(ctx, "backward_callable_id")
    skip = set(ctx.attr("backward_skip_vars") or ())
    x_names = ctx.op.inputs.get("X", [])
    keep_x = [n not in skip for n in x_names]
    keep_out = [n not in skip for n in out_names]
    keep_dout = [n + "@GRAD" not in skip for n in out_names]
    x_structs = [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in xs]
    floats = [jnp.issubdtype(x.dtype, jnp.inexact) for x in xs]
    grad_structs = [s for s, f in zip(x_structs, floats) if f]
    back_site = site + ("backward",)

    def host_backward(ticket, *arrays):
        def call():
            grads = backward(*arrays)
            grads = list(grads) if isinstance(grads, (list, tuple)) else [grads]
            if len(grads) != len(xs):
                raise ValueError(f"py_func: the backward function returned {len(grads)} gradients for {len(xs)} "
                                 "inputs")
            return [np.zeros(s.shape, s.dtype) if g is None else _host_array(g, s)
                    for g, s, f in zip(grads, x_structs, floats) if f]
        return effects.call_once(np.asarray(ticket), back_site, arrays, call,
                                 lambda: [np.zeros(s.shape, s.dtype) for s in grad_structs])

    def call_backward(ticket, arrays, outs, douts):
        args = ([a for a, k in zip(arrays, keep_x) if k] + [o for o, k in zip(outs, keep_out) if k]
                + [d for d, k in zip(douts, keep_dout) if k])
        got = iter(jax.pure_callback(host_backward, grad_structs, ticket, *args))
        return tuple(next(got) if f else np.zeros(s.shape, jax.dtypes.float0) for s, f in zip(x_structs, floats))

    return call_backward


def _py_func_grad(ctx):
    """``py_func_grad`` without recomputing the forward: the grad op holds the forward's Out, so the
    backward function gets them as they were, and the forward function is called once a run (as in
    Fluid), not again by the generic rule's recomputation."""
    xs = [x.data if x.__class__ is LoDValue else x for x in ctx.inputs("X")]
    outs = [o.data if o.__class__ is LoDValue else o for o in ctx.inputs("Out")]
    given = ctx.inputs("Out@GRAD")
    douts = [jnp.zeros_like(o) if j >= len(given) or given[j] is None
             else jnp.asarray(given[j].data if given[j].__class__ is LoDValue else given[j], o.dtype).reshape(o.shape)
             for j, o in enumerate(outs)]
    grads = _backward_call(ctx, xs, ctx.op.inputs.get("Out", []), effects.site_of(ctx.op, "py_func"))(
        effects.traced_ticket(), xs, outs, douts)
    return {"X@GRAD": [g if jnp.issubdtype(x.dtype, jnp.inexact) else None for g, x in zip(grads, xs)]}


def _py_func_grad_applies(op) -> bool:
    return bool(op.inputs.get("Out")) and int(op.attrs.get("backward_callable_id", -1)) >= 0


paddle_grads.DIRECT["py_func"] = (_py_func_grad_applies, _py_func_grad)


lod_aware("print")
