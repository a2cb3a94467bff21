"""Math and tensor ops that real saved models and Paddle 2.x's API produce, beyond the core families.

Unary math (trigonometric, hyperbolic, log1p, expm1, log2/log10, erf, trunc) and activations
(mish, selu, celu, shrinks, thresholded_relu, logsigmoid, brelu); tests (isnan_v2, isinf_v2,
isclose); bitwise ops; heaviside, atan2; logsumexp, p_norm, dist, cumprod, reduce_any/all/amax/
amin, size; bmm, einsum, kron; tril_triu, flip, roll, meshgrid, argsort, unbind, diag_v2,
repeat_interleave; index_select, index_sample and the take/put_along_axis pair; expand_as_v2;
assign_value and set_value; and the ops whose output size depends on the data (where_index,
masked_select, unique: padded and counted, see docs/ops_data_dependent.md).

Each op follows its Paddle 2.6.2 kernel (type name, slots, attributes, semantics); gradients are
the vjp of the JAX rule except where Paddle defines none (bool and integer results).
"""

from __future__ import annotations

import string

import jax
import jax.numpy as jnp
import numpy as np

from ...ir import dtypes
from ...ir.errors import OpRuntimeError
from ...ir.registry import Attr, op
from .activation import _unary  # one registration rule for every elementwise unary op
from ...ir.shape import InferShapeContext, same_as
from ._shapes import paddle_broadcast
from ..lod_value import LoDValue
from .manipulation import static_ints


def _fail(ctx, message: str):
    raise OpRuntimeError(f"op {ctx.opdef.type!r}: {message}")


def _const(x, value):
    """``value`` as a scalar of x's dtype (keeps float32 programs float32)."""
    return jnp.asarray(value, x.dtype)


# -- unary math and activations --------------------------------------------------------------------
def _mish(x, ctx):
    # Paddle's softplus with a threshold: x above it, exp(x) below -threshold, log1p(exp(x)) between.
    t = _const(x, ctx.attr("threshold"))
    sp = jnp.where(x > t, x, jnp.where(x < -t, jnp.exp(jnp.minimum(x, t)), jnp.log1p(jnp.exp(jnp.minimum(x, t)))))
    return x * jnp.tanh(sp)


def _selu(x, ctx):
    scale, alpha = _const(x, ctx.attr("scale")), _const(x, ctx.attr("alpha"))
    return scale * jnp.where(x > 0, x, alpha * jnp.expm1(jnp.minimum(x, 0)))


def _celu(x, ctx):
    alpha = _const(x, ctx.attr("alpha"))
    return jnp.where(x > 0, x, alpha * jnp.expm1(jnp.minimum(x, 0) / alpha))


def _softshrink(x, ctx):
    lam = _const(x, ctx.attr("lambda"))
    return jnp.where(x > lam, x - lam, jnp.where(x < -lam, x + lam, jnp.zeros((), x.dtype)))


def _hard_shrink(x, ctx):
    t = _const(x, ctx.attr("threshold"))
    return jnp.where((x > t) | (x < -t), x, jnp.zeros((), x.dtype))


_unary("log1p", lambda x, ctx: jnp.log1p(x), "log(1 + X), accurate near 0.")
_unary("erf", lambda x, ctx: jax.scipy.special.erf(x), "The error function of X.")
_unary("sin", lambda x, ctx: jnp.sin(x), "sin(X).")
_unary("cos", lambda x, ctx: jnp.cos(x), "cos(X).")
_unary("tan", lambda x, ctx: jnp.tan(x), "tan(X).")
_unary("asin", lambda x, ctx: jnp.arcsin(x), "arcsin(X).")
_unary("acos", lambda x, ctx: jnp.arccos(x), "arccos(X).")
_unary("atan", lambda x, ctx: jnp.arctan(x), "arctan(X).")
_unary("sinh", lambda x, ctx: jnp.sinh(x), "sinh(X).")
_unary("cosh", lambda x, ctx: jnp.cosh(x), "cosh(X).")
_unary("mish", _mish, "X * tanh(softplus(X)), softplus being X above ``threshold`` (and exp(X) below "
       "-threshold), as Paddle computes it.", {"threshold": 20.0})
_unary("selu", _selu, "scale * (X where X > 0, else alpha * (exp(X) - 1)).",
       {"scale": 1.0507009873554805, "alpha": 1.6732632423543772})
_unary("celu", _celu, "X where X > 0, else alpha * (exp(X / alpha) - 1).", {"alpha": 1.0})
_unary("thresholded_relu", lambda x, ctx: jnp.where(x > _const(x, ctx.attr("threshold")), x, jnp.zeros((), x.dtype)),
       "X where X > threshold, else 0.", {"threshold": 1.0})
_unary("tanh_shrink", lambda x, ctx: x - jnp.tanh(x), "X - tanh(X).")
_unary("softshrink", _softshrink, "X - lambda above lambda, X + lambda below -lambda, else 0.", {"lambda": 0.5})
_unary("hard_shrink", _hard_shrink, "X where |X| > threshold, else 0 (Paddle's name for hardshrink).",
       {"threshold": 0.5})


def _bool_like_x(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    ctx.set_output("Out", x.shape, "bool", x.lod_level)


@op("isnan_v2", inputs="X", outputs="Out", infer_shape=_bool_like_x, grad=None)
def isnan_v2(ctx):
    """Whether each element of X is NaN (bool; never for integers)."""
    x = ctx.input("X")
    return {"Out": jnp.isnan(x) if jnp.issubdtype(x.dtype, jnp.inexact) else jnp.zeros(x.shape, jnp.bool_)}


@op("isinf_v2", inputs="X", outputs="Out", infer_shape=_bool_like_x, grad=None)
def isinf_v2(ctx):
    """Whether each element of X is +inf or -inf (bool; never for integers)."""
    x = ctx.input("X")
    return {"Out": jnp.isinf(x) if jnp.issubdtype(x.dtype, jnp.inexact) else jnp.zeros(x.shape, jnp.bool_)}


# -- binary elementwise ----------------------------------------------------------------------------
def _numpy_broadcast_shape(ctx: InferShapeContext, same_dtype: bool = True):
    x, y = ctx.input("X"), ctx.input("Y")
    out = paddle_broadcast(x.shape, y.shape, -1)
    ctx.check(out is not None, f"X {x.shape} and Y {y.shape} do not broadcast")
    if same_dtype:
        ctx.check(x.dtype == y.dtype, f"X is {x.dtype} but Y is {y.dtype}; cast one of them first")
    return out


def _binary_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    ctx.set_output("Out", _numpy_broadcast_shape(ctx), x.dtype, x.lod_level)


@op("elementwise_heaviside", inputs="X Y", outputs="Out", infer_shape=_binary_shape)
def elementwise_heaviside(ctx):
    """Heaviside step of X: 0 where X < 0, 1 where X > 0 and Y where X == 0 (NumPy broadcasting).

    The gradient is 0 for X and Out@GRAD where X == 0 for Y, as in Paddle."""
    x, y = ctx.input("X"), ctx.input("Y")
    return {"Out": jnp.where(x == 0, y, (x > 0).astype(x.dtype))}


def _bitwise(name: str, fn, doc: str) -> None:
    def rule(ctx):
        x, y = ctx.input("X"), ctx.input("Y")
        if x.dtype != jnp.bool_ and not jnp.issubdtype(x.dtype, jnp.integer):
            _fail(ctx, f"needs integer or bool inputs, got {x.dtype}")
        return {"Out": fn(x, y)}

    rule.__doc__ = doc
    rule.__name__ = name
    op(name, inputs="X Y", outputs="Out", infer_shape=_binary_shape, grad=None)(rule)


_bitwise("bitwise_and", jnp.bitwise_and, "X & Y bit by bit (integers; logical and for bool), NumPy broadcasting.")
_bitwise("bitwise_or", jnp.bitwise_or, "X | Y bit by bit (integers; logical or for bool), NumPy broadcasting.")
_bitwise("bitwise_xor", jnp.bitwise_xor, "X ^ Y bit by bit (integers; logical xor for bool), NumPy broadcasting.")


@op("bitwise_not", inputs="X", outputs="Out", infer_shape=same_as("X"), grad=None)
def bitwise_not(ctx):
    """~X bit by bit (integers; logical not for bool)."""
    return {"Out": jnp.invert(ctx.input("X"))}


# -- reductions ------------------------------------------------------------------------------------
def _axes(ndim: int, axis, reduce_all: bool) -> tuple[int, ...]:
    """Paddle's recompute_reduce_all: no axis, every axis, or ``reduce_all`` reduce everything."""
    axis = [int(a) for a in (axis or [])]
    if reduce_all or not axis or len(axis) == ndim:
        return tuple(range(ndim))
    return tuple(sorted({a % ndim for a in axis}))


def _logsumexp_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    axis = ctx.attr("axis") or []
    ctx.check(all(-max(x.ndim, 1) <= a < max(x.ndim, 1) for a in axis),
              f"axis {list(axis)} is out of range for a rank-{x.ndim} input")
    axes = _axes(x.ndim, axis, ctx.attr("reduce_all"))
    keep = ctx.attr("keepdim")
    shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape)) if keep else \
        tuple(d for i, d in enumerate(x.shape) if i not in axes)
    ctx.set_output("Out", shape, x.dtype, 0)


@op("logsumexp", inputs="X", outputs="Out", attrs={"axis": Attr("ints", [0]), "keepdim": False, "reduce_all": False},
    infer_shape=_logsumexp_shape)
def logsumexp(ctx):
    """log(sum(exp(X))) over ``axis`` (all axes when ``reduce_all`` or when axis lists every axis or
    none), computed stably; ``keepdim`` keeps the reduced axes as 1s."""
    x = ctx.input("X")
    axes = _axes(x.ndim, ctx.attr("axis"), ctx.attr("reduce_all"))
    return {"Out": jax.scipy.special.logsumexp(x, axis=axes, keepdims=bool(ctx.attr("keepdim")))}


def _p_norm_of(x, p: float, axis, keepdim: bool):
    if p == 0:
        return jnp.sum((x != 0).astype(x.dtype), axis=axis, keepdims=keepdim)
    if p == np.inf:
        return jnp.max(jnp.abs(x), axis=axis, keepdims=keepdim)
    if p == -np.inf:
        return jnp.min(jnp.abs(x), axis=axis, keepdims=keepdim)
    p_ = jnp.asarray(p, x.dtype)
    return jnp.power(jnp.sum(jnp.power(jnp.abs(x), p_), axis=axis, keepdims=keepdim), 1 / p_)


def _p_norm_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    keep = ctx.attr("keepdim")
    if ctx.attr("asvector"):
        shape = (1,) * x.ndim if keep else ()
    else:
        axis = ctx.attr("axis")
        ctx.check(-x.ndim <= axis < x.ndim, f"axis {axis} is out of range for a rank-{x.ndim} input")
        axis %= x.ndim
        shape = tuple(1 if i == axis else d for i, d in enumerate(x.shape)) if keep else \
            tuple(d for i, d in enumerate(x.shape) if i != axis)
    ctx.set_output("Out", shape, x.dtype, 0)


@op("p_norm", inputs="X", outputs="Out",
    attrs={"porder": 2.0, "axis": -1, "epsilon": 1e-12, "keepdim": False, "asvector": False},
    infer_shape=_p_norm_shape)
def p_norm(ctx):
    """The ``porder``-norm of X along ``axis`` (of all of X when ``asvector``): (sum |X|^p)^(1/p);
    p = 0 counts non-zeros, p = ±inf is the largest/smallest |X|."""
    x = ctx.input("X")
    keep = bool(ctx.attr("keepdim"))
    p = float(ctx.attr("porder"))
    if ctx.attr("asvector"):
        out = _p_norm_of(x.reshape(-1), p, 0, False)
        return {"Out": out.reshape((1,) * x.ndim) if keep else out}
    return {"Out": _p_norm_of(x, p, int(ctx.attr("axis")) % max(x.ndim, 1), keep)}


def _dist_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    _numpy_broadcast_shape(ctx)
    ctx.set_output("Out", (), x.dtype, 0)


@op("dist", inputs="X Y", outputs="Out", attrs={"p": 2.0}, infer_shape=_dist_shape)
def dist(ctx):
    """The ``p``-norm of X - Y (NumPy broadcasting) as a 0-d tensor (p = 0: non-zeros; ±inf: max/min)."""
    x, y = ctx.input("X"), ctx.input("Y")
    return {"Out": _p_norm_of((x - y).reshape(-1), float(ctx.attr("p")), 0, False)}


@op("cumprod", inputs="X", outputs="Out", attrs={"dim": -1}, infer_shape=same_as("X"))
def cumprod(ctx):
    """Cumulative product of X along ``dim``."""
    x = ctx.input("X")
    if x.ndim == 0:
        return {"Out": x}
    return {"Out": jnp.cumprod(x, axis=int(ctx.attr("dim")) % x.ndim)}


# -- products ----------------------------------------------------------------------------------------
def _bmm_shape(ctx: InferShapeContext) -> None:
    x, y = ctx.input("X"), ctx.input("Y")
    ctx.check(x.ndim == 3 and y.ndim == 3, f"bmm needs 3-D X and Y, got {x.shape} and {y.shape}")
    ctx.check(x.dtype == y.dtype, f"X is {x.dtype} but Y is {y.dtype}")
    ctx.check(x.shape[2] < 0 or y.shape[1] < 0 or x.shape[2] == y.shape[1],
              f"X {x.shape} and Y {y.shape}: X's last dim must equal Y's second")
    ctx.check(x.shape[0] < 0 or y.shape[0] < 0 or x.shape[0] == y.shape[0],
              f"X {x.shape} and Y {y.shape} have different batch sizes")
    ctx.set_output("Out", (x.shape[0] if x.shape[0] >= 0 else y.shape[0], x.shape[1], y.shape[2]), x.dtype, 0)


@op("bmm", inputs="X Y", outputs="Out", infer_shape=_bmm_shape)
def bmm(ctx):
    """Batched matrix product: X [B, M, K] @ Y [B, K, N] -> [B, M, N]."""
    return {"Out": jnp.matmul(ctx.input("X"), ctx.input("Y"))}


def _einsum_operands(equation: str, n: int):
    """(per-operand subscripts, output subscripts, explicit?) of an einsum equation."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != n:
        raise ValueError(f"equation {equation!r} names {len(terms)} operands but {n} are given")
    return terms, rhs, bool(arrow)


def _einsum_shape(ctx: InferShapeContext) -> None:
    xs = ctx.inputs("Operands")
    eq = ctx.attr("equation")
    try:
        terms, _, _ = _einsum_operands(eq, len(xs))
    except ValueError as e:
        ctx.fail(str(e))
    for term, x in zip(terms, xs):
        ctx.check("..." in term or len(term) == x.ndim,
                  f"equation {eq!r}: operand {term!r} has {len(term)} subscripts but the input is {x.shape}")
    structs = [jax.ShapeDtypeStruct(tuple(max(d, 1) for d in x.shape), dtypes.to_numpy(x.dtype)) for x in xs]
    try:
        out = jax.eval_shape(lambda *a: jnp.einsum(eq, *a), *structs)
    except Exception as e:  # noqa: BLE001 - jnp's message names the problem
        ctx.fail(f"equation {eq!r} does not fit the inputs {[x.shape for x in xs]}: {e}")
    # Which input dim each output dim comes from: -1 there means -1 here.
    shape = list(out.shape)
    letters = _out_letters(eq, [x.ndim for x in xs])
    if letters is not None:
        for i, letter in enumerate(letters):
            for term, x in zip(_expand_terms(eq, [x.ndim for x in xs]), xs):
                if letter in term and x.shape[term.index(letter)] < 0:
                    shape[i] = -1
    ctx.set_output("Out", shape, xs[0].dtype, 0)
    for i, x in enumerate(xs):
        if i < len(ctx.op.outputs.get("XShape", ())):
            ctx.set_output("XShape", x.shape, x.dtype, 0, index=i)
        if i < len(ctx.op.outputs.get("InnerCache", ())):
            ctx.set_output("InnerCache", x.shape, x.dtype, 0, index=i)


def _expand_terms(eq: str, ranks) -> list[str]:
    """Operand subscripts with ``...`` spelled out as upper-case letters (right-aligned)."""
    terms, _, _ = _einsum_operands(eq, len(ranks))
    width = max([r - (len(t) - 3) for t, r in zip(terms, ranks) if "..." in t] or [0])
    fill = string.ascii_uppercase[:width]
    out = []
    for t, r in zip(terms, ranks):
        if "..." in t:
            n = r - (len(t) - 3)
            t = t.replace("...", fill[width - n:])
        out.append(t)
    return out


def _out_letters(eq: str, ranks) -> str | None:
    terms, rhs, explicit = _einsum_operands(eq, len(ranks))
    expanded = _expand_terms(eq, ranks)
    width = max([r - (len(t) - 3) for t, r in zip(terms, ranks) if "..." in t] or [0])
    fill = string.ascii_uppercase[:width]
    if explicit:
        return rhs.replace("...", fill)
    counts = {}
    for t in expanded:
        for c in t:
            counts[c] = counts.get(c, 0) + 1
    return fill + "".join(sorted(c for c, k in counts.items() if k == 1 and c.islower()))


@op("einsum", inputs="Operands*", outputs="Out InnerCache* XShape*", attrs={"equation": ""},
    infer_shape=_einsum_shape, no_grad_outputs=["InnerCache", "XShape"])
def einsum(ctx):
    """Einstein summation of the Operands by ``equation`` (NumPy's notation, ``...`` broadcasting).

    ``InnerCache`` and ``XShape`` are Paddle's intermediates for its gradient kernel (one per
    operand; Paddle's einsum_grad needs them, so they are required here as Paddle's Python API
    always writes them); here they are copies of the operands, unused by our gradient (the vjp of
    the forward), and XLA drops them."""
    xs = ctx.inputs("Operands")
    out = {"Out": jnp.einsum(ctx.attr("equation"), *xs)}
    if ctx.has_output("XShape"):
        out["XShape"] = list(xs)
    if ctx.has_output("InnerCache"):
        out["InnerCache"] = list(xs)
    return out


# -- rearranging -----------------------------------------------------------------------------------
@op("tril_triu", inputs="X", outputs="Out", attrs={"diagonal": 0, "lower": True}, infer_shape=same_as("X"))
def tril_triu(ctx):
    """The lower (``lower``) or upper triangle of the last two dims of X, from the ``diagonal``-th
    diagonal (0 main, > 0 above it, < 0 below it); the rest is 0."""
    x = ctx.input("X")
    k = int(ctx.attr("diagonal"))
    return {"Out": jnp.tril(x, k) if ctx.attr("lower") else jnp.triu(x, k)}


def _flip_axes(ctx, ndim: int) -> list[int]:
    axes = [int(a) for a in ctx.attr("axis")]
    if any(not -max(ndim, 1) <= a < max(ndim, 1) for a in axes):
        _fail(ctx, f"axis {axes} is out of range for a rank-{ndim} input")
    return [a % ndim for a in axes] if ndim else []


@op("flip", inputs="X", outputs="Out", attrs={"axis": Attr("ints", [])}, infer_shape=same_as("X"))
def flip(ctx):
    """X with the order of its elements reversed along each of ``axis``."""
    x = ctx.input("X")
    return {"Out": jnp.flip(x, axis=tuple(_flip_axes(ctx, x.ndim))) if x.ndim else x}


@op("roll", inputs="X ShiftsTensor?", outputs="Out", attrs={"shifts": Attr("longs", []), "axis": Attr("longs", [])},
    infer_shape=same_as("X"), no_grad_inputs=["ShiftsTensor"])
def roll(ctx):
    """X rolled by ``shifts`` along ``axis`` (elements past the end come back at the start); with no
    axis, X is rolled as a flat array. A ``ShiftsTensor`` replaces ``shifts`` (its values may be
    known only at run time: the shape does not depend on them)."""
    x = ctx.input("X")
    tensor = ctx.input("ShiftsTensor")
    axis = [int(a) for a in ctx.attr("axis")]
    if tensor is not None:
        shifts = tensor.reshape(-1)
        count = shifts.shape[0]
    else:
        shifts = [int(s) for s in ctx.attr("shifts")]
        count = len(shifts)
    if not axis:
        if count != 1:
            _fail(ctx, f"without axis, shifts must hold one value, got {count}")
        return {"Out": jnp.roll(x.reshape(-1), shifts[0]).reshape(x.shape)}
    if count != len(axis):
        _fail(ctx, f"shifts ({count} values) and axis {axis} must have the same length")
    out = x
    for i, a in enumerate(axis):
        out = jnp.roll(out, shifts[i], axis=a % x.ndim)
    return {"Out": out}


def _meshgrid_shape(ctx: InferShapeContext) -> None:
    xs = ctx.inputs("X")
    ctx.check(all(x.ndim <= 1 for x in xs), f"meshgrid needs 0-D or 1-D inputs, got {[x.shape for x in xs]}")
    ctx.check(len({x.dtype for x in xs}) == 1, f"meshgrid needs inputs of one dtype, got {[x.dtype for x in xs]}")
    shape = tuple(x.shape[0] if x.ndim == 1 else 1 for x in xs)
    for i, x in enumerate(xs):
        ctx.set_output("Out", shape, x.dtype, 0, index=i)


@op("meshgrid", inputs="X*", outputs="Out*", infer_shape=_meshgrid_shape)
def meshgrid(ctx):
    """Coordinate grids of the 1-D inputs ("ij" indexing): Out[i] has shape [len(X0), len(X1), ...]
    and varies along dim i."""
    xs = [x.reshape(-1) for x in ctx.inputs("X")]
    return {"Out": list(jnp.meshgrid(*xs, indexing="ij"))}


def _argsort_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    axis = ctx.attr("axis")
    ctx.check(-max(x.ndim, 1) <= axis < max(x.ndim, 1), f"axis {axis} is out of range for a rank-{x.ndim} input")
    ctx.set_output("Out", x.shape, x.dtype, x.lod_level)
    ctx.set_output("Indices", x.shape, "int64", x.lod_level)


@op("argsort", inputs="X", outputs="Out Indices", attrs={"axis": -1, "descending": False},
    infer_shape=_argsort_shape, no_grad_outputs=["Indices"])
def argsort(ctx):
    """X sorted along ``axis`` (Out) and the int64 positions the sorted elements came from
    (Indices); ``descending`` sorts largest first. Ties keep their order (a stable sort)."""
    x = ctx.input("X")
    if x.ndim == 0:
        return {"Out": x, "Indices": jnp.zeros((), jnp.int64)}
    axis = int(ctx.attr("axis")) % x.ndim
    idx = jnp.argsort(x, axis=axis, stable=True, descending=bool(ctx.attr("descending")))
    return {"Out": jnp.take_along_axis(x, idx, axis=axis), "Indices": idx.astype(jnp.int64)}


# -- gathering and scattering ----------------------------------------------------------------------
def _index_select_shape(ctx: InferShapeContext) -> None:
    x, index = ctx.input("X"), ctx.input("Index")
    dim = ctx.attr("dim")
    ctx.check(-x.ndim <= dim < x.ndim, f"dim {dim} is out of range for a rank-{x.ndim} X")
    ctx.check(index.ndim <= 1, f"Index must be 1-D, got {index.shape}")
    ctx.check(index.dtype in ("int32", "int64"), f"Index must be int32 or int64, got {index.dtype}")
    shape = list(x.shape)
    shape[dim % x.ndim] = index.shape[0] if index.ndim == 1 else 1
    ctx.set_output("Out", shape, x.dtype, 0)


@op("index_select", inputs="X Index", outputs="Out", attrs={"dim": 0}, infer_shape=_index_select_shape,
    no_grad_inputs=["Index"])
def index_select(ctx):
    """The slices of X at positions ``Index`` (1-D) along ``dim``."""
    x, index = ctx.input("X"), ctx.input("Index")
    dim = int(ctx.attr("dim")) % x.ndim
    index = index.reshape(-1)
    index = jnp.where(index < 0, index + x.shape[dim], index)
    return {"Out": jnp.take(x, index, axis=dim, mode="clip")}


def _along_axis_index(x_ndim: int, index, axis: int, axis_size: int):
    """The full index tuple of Paddle's *_along_axis: Index's own coordinates, except along ``axis``."""
    index = jnp.where(index < 0, index + axis_size, index)
    grids = list(jnp.indices(index.shape, sparse=True))
    return tuple(index if d == axis else grids[d] for d in range(x_ndim))


def _along_shape(ctx: InferShapeContext, out: str) -> None:
    x, index = ctx.input("Input"), ctx.input("Index")
    axis = ctx.attr("Axis")
    ctx.check(x.ndim == index.ndim, f"Input {x.shape} and Index {index.shape} must have the same rank")
    ctx.check(-x.ndim <= axis < x.ndim, f"Axis {axis} is out of range for a rank-{x.ndim} Input")
    ctx.check(index.dtype in ("int32", "int64"), f"Index must be int32 or int64, got {index.dtype}")
    shape = index.shape if out == "take" else x.shape
    ctx.set_output("Result", shape, x.dtype, 0)


@op("take_along_axis", inputs="Input Index", outputs="Result", attrs={"Axis": 0},
    infer_shape=lambda ctx: _along_shape(ctx, "take"), no_grad_inputs=["Index"])
def take_along_axis(ctx):
    """Result[i, j, k] = Input[Index[i, j, k], j, k] for Axis 0 (likewise for other axes); Result has
    Index's shape."""
    x, index = ctx.input("Input"), ctx.input("Index")
    axis = int(ctx.attr("Axis")) % x.ndim
    return {"Result": x[_along_axis_index(x.ndim, index, axis, x.shape[axis])]}


_PUT_REDUCE = ("assign", "add", "mul", "multiply", "mean", "amin", "amax")


def _put_shape(ctx: InferShapeContext) -> None:
    ctx.check(ctx.attr("Reduce") in _PUT_REDUCE, f"Reduce must be one of {_PUT_REDUCE}, got {ctx.attr('Reduce')!r}")
    _along_shape(ctx, "put")


@op("put_along_axis", inputs="Input Index Value", outputs="Result",
    attrs={"Axis": 0, "Reduce": "assign", "Include_self": True}, infer_shape=_put_shape, no_grad_inputs=["Index"])
def put_along_axis(ctx):
    """Input with Value written at Index along Axis (the inverse of take_along_axis): ``Reduce``
    "assign" replaces, "add"/"mul" accumulate, "mean"/"amin"/"amax" combine the values sent to one
    place (with the original element too when ``Include_self``). Value has Index's shape (a
    broadcastable Value is broadcast to it). Where one place gets several values under "assign",
    which one wins is not defined (Paddle's CPU kernel: the last)."""
    x, index, value = ctx.input("Input"), ctx.input("Index"), ctx.input("Value")
    axis = int(ctx.attr("Axis")) % x.ndim
    value = jnp.broadcast_to(value.astype(x.dtype), index.shape)
    where = _along_axis_index(x.ndim, index, axis, x.shape[axis])
    reduce = ctx.attr("Reduce")
    include_self = bool(ctx.attr("Include_self"))
    if reduce == "assign":
        return {"Result": x.at[where].set(value)}
    touched = jnp.zeros(x.shape, jnp.bool_).at[where].set(True)
    if reduce == "add":
        base = x if include_self else jnp.where(touched, jnp.zeros((), x.dtype), x)
        return {"Result": base.at[where].add(value)}
    if reduce in ("mul", "multiply"):
        base = x if include_self else jnp.where(touched, jnp.ones((), x.dtype), x)
        return {"Result": base.at[where].multiply(value)}
    if reduce == "mean":
        count = jnp.zeros(x.shape, x.dtype).at[where].add(jnp.ones((), x.dtype))
        base = x if include_self else jnp.where(touched, jnp.zeros((), x.dtype), x)
        total = base.at[where].add(value)
        denom = count + (1 if include_self else 0)
        if jnp.issubdtype(x.dtype, jnp.integer):
            mean = total // jnp.maximum(denom, 1)
        else:
            mean = total / jnp.maximum(denom, 1)
        return {"Result": jnp.where(touched, mean, x)}
    if reduce in ("amin", "amax"):
        big = jnp.finfo(x.dtype).max if jnp.issubdtype(x.dtype, jnp.floating) else jnp.iinfo(x.dtype).max
        fill = big if reduce == "amin" else -big if jnp.issubdtype(x.dtype, jnp.floating) else jnp.iinfo(x.dtype).min
        base = x if include_self else jnp.where(touched, jnp.asarray(fill, x.dtype), x)
        out = base.at[where].min(value) if reduce == "amin" else base.at[where].max(value)
        return {"Result": out}
    _fail(ctx, f"Reduce must be one of {_PUT_REDUCE}, got {reduce!r}")


# -- filling and expanding -------------------------------------------------------------------------
def _expand_as_target(ctx, x_shape, y_shape) -> list[int]:
    target = list(y_shape) if y_shape is not None else [int(d) for d in ctx.attr("target_shape")]
    if len(target) < len(x_shape):
        raise ValueError(f"the target shape {target} has fewer dims than X {list(x_shape)}")
    offset = len(target) - len(x_shape)
    # A -1 in the attribute keeps X's dim there (Paddle's expand rule).
    return [x_shape[i - offset] if d == -1 and i >= offset else d for i, d in enumerate(target)]


def _expand_as_shape(ctx: InferShapeContext) -> None:
    x, y = ctx.input("X"), ctx.input("Y")
    try:
        target = _expand_as_target(ctx, x.shape, y.shape if y is not None else None)
    except ValueError as e:
        ctx.fail(str(e))
    offset = len(target) - x.ndim
    for i, d in enumerate(x.shape):
        t = target[i + offset]
        ctx.check(d < 0 or t < 0 or d == t or d == 1, f"X {x.shape} cannot expand to {target}")
    ctx.set_output("Out", target, x.dtype, 0)


@op("expand_as_v2", inputs="X Y?", outputs="Out", attrs={"target_shape": Attr("ints", [])},
    infer_shape=_expand_as_shape, no_grad_inputs=["Y"])
def expand_as_v2(ctx):
    """X broadcast to Y's shape (or to ``target_shape`` when Y is not given); dims of X that are 1
    repeat. The gradient sums over the repeats."""
    x, y = ctx.input("X"), ctx.input("Y")
    try:
        target = _expand_as_target(ctx, x.shape, y.shape if y is not None else None)
    except ValueError as e:
        _fail(ctx, str(e))
    return {"Out": jnp.broadcast_to(x, tuple(target))}


_ASSIGN_VALUE_FIELDS = {"bool": "bool_values", "int32": "int32_values", "int64": "int64_values",
                        "float32": "fp32_values", "float64": "fp64_values"}


def _assign_value_dtype(ctx) -> str:
    return dtypes.from_enum(ctx.attr("dtype"))


def _assign_value_shape(ctx: InferShapeContext) -> None:
    dtype = _assign_value_dtype(ctx)
    ctx.check(dtype in _ASSIGN_VALUE_FIELDS, f"dtype {dtype} is not one assign_value holds "
                                             f"({', '.join(_ASSIGN_VALUE_FIELDS)})")
    ctx.set_output("Out", [int(d) for d in ctx.attr("shape")], dtype, 0)


@op("assign_value", inputs="", outputs="Out",
    attrs={"shape": Attr("ints", []), "dtype": 5, "bool_values": Attr("ints", []),
           "fp32_values": Attr("floats", []), "fp64_values": Attr("float64s", []),
           "int32_values": Attr("ints", []), "int64_values": Attr("longs", [])},
    infer_shape=_assign_value_shape, grad=None)
def assign_value(ctx):
    """A constant tensor of ``shape`` and ``dtype`` whose values are in the attribute for the dtype
    (``fp32_values``, ``int64_values``, ...)."""
    dtype = _assign_value_dtype(ctx)
    if dtype not in _ASSIGN_VALUE_FIELDS:
        _fail(ctx, f"dtype {dtype} is not one assign_value holds ({', '.join(_ASSIGN_VALUE_FIELDS)})")
    shape = tuple(int(d) for d in ctx.attr("shape"))
    values = np.asarray(list(ctx.attr(_ASSIGN_VALUE_FIELDS[dtype]) or []), dtypes.to_numpy(dtype))
    if values.size != int(np.prod(shape)):
        _fail(ctx, f"{_ASSIGN_VALUE_FIELDS[dtype]} holds {values.size} values but shape {list(shape)} needs "
                   f"{int(np.prod(shape))}")
    return {"Out": jnp.asarray(values.reshape(shape))}


# -- set_value -------------------------------------------------------------------------------------
def _scalar_value(s):
    """A Python value from a Paddle ``Scalar`` message (or a plain number)."""
    if isinstance(s, (bool, int, float, complex)):
        return s
    # Scalar.Type: BOOLEAN 1, LONG 2, FLOAT64 3, COMPLEX128 4.
    if s.type == 1:
        return bool(s.b)
    if s.type == 2:
        return int(s.i)
    if s.type == 3:
        return float(s.r)
    return complex(s.c.r, s.c.i)


def _set_value_slices(ctx, shape):
    """(index tuple, the shape the indexed region has before decrease/none axes) for set_value."""
    axes = [int(a) for a in ctx.attr("axes")]
    starts = static_ints(ctx, "StartsTensorList", what="starts")
    ends = static_ints(ctx, "EndsTensorList", what="ends")
    steps = static_ints(ctx, "StepsTensorList", what="steps")
    starts = starts if starts is not None else [int(v) for v in ctx.attr("starts")]
    ends = ends if ends is not None else [int(v) for v in ctx.attr("ends")]
    steps = steps if steps is not None else [int(v) for v in ctx.attr("steps")] or [1] * len(axes)
    if not len(axes) == len(starts) == len(ends) == len(steps):
        _fail(ctx, f"axes {axes}, starts {starts}, ends {ends} and steps {steps} must have one length")
    index = [slice(None)] * len(shape)
    for a, s, e, st in zip(axes, starts, ends, steps):
        if st == 0:
            _fail(ctx, "a step of 0 is not allowed")
        n = shape[a]
        # Paddle's normalisation: negative bounds count from the end, then clamp to the dim.
        s = s + n if s < 0 else s
        e = e + n if e < 0 else e
        if st > 0:
            s, e = min(max(s, 0), n), min(max(e, 0), n)
        else:
            s, e = min(max(s, -1), n - 1), min(max(e, -1), n - 1)
        index[a] = slice(s, e if e >= 0 else None, st)
    return tuple(index)


@op("set_value", inputs="Input ValueTensor? StartsTensorList*? EndsTensorList*? StepsTensorList*?", outputs="Out",
    attrs={"dtype": 5, "axes": Attr("longs", []), "starts": Attr("longs", []), "ends": Attr("longs", []),
           "steps": Attr("longs", []), "decrease_axes": Attr("longs", []), "none_axes": Attr("longs", []),
           "values": Attr("scalars", []), "shape": Attr("longs", [])},
    infer_shape=same_as("Input"), no_grad_inputs=["StartsTensorList", "EndsTensorList", "StepsTensorList"])
def set_value(ctx):
    """Input with the slice [starts:ends:steps] over ``axes`` replaced by ValueTensor, or by the
    ``values`` attribute (shaped ``shape``), broadcast to the slice (Paddle's ``x[...] = v``).

    The gradient is Out@GRAD outside the slice for Input (0 inside) and the slice of Out@GRAD,
    summed over the broadcast, for ValueTensor."""
    x = ctx.input("Input")
    index = _set_value_slices(ctx, x.shape)
    region = x[index]
    value = ctx.input("ValueTensor")
    if value is None:
        raw = [_scalar_value(s) for s in ctx.attr("values") or []]
        shape = [int(d) for d in ctx.attr("shape")] or [len(raw)]
        value = jnp.asarray(np.asarray(raw).astype(dtypes.to_numpy(x.dtype)).reshape(shape))
    value = value.astype(x.dtype)
    # Paddle broadcasts the value to the region's shape with decrease_axes dropped and a 1 put at
    # each of none_axes (positions in that result), then views it with the region's shape.
    decrease = {int(a) for a in ctx.attr("decrease_axes")}
    none_axes = sorted(int(a) for a in ctx.attr("none_axes"))
    assign_shape, k = [], 0
    for i, d in enumerate(region.shape):
        while k < len(none_axes) and none_axes[k] <= i:
            assign_shape.append(1)
            k += 1
        if i not in decrease:
            assign_shape.append(d)
    assign_shape += [1] * (len(none_axes) - k)
    try:
        value = jnp.broadcast_to(value, tuple(assign_shape))
    except ValueError:
        _fail(ctx, f"the value of shape {list(value.shape)} does not broadcast to the slice {assign_shape}")
    value = value.reshape(region.shape)
    return {"Out": x.at[index].set(value)}


# -- data-dependent output sizes (docs/ops_data_dependent.md) ---------------------------------------
# The number of rows of these outputs depends on the data. Inside jax.jit an output is padded to a
# static capacity (the most rows the input allows) and carried as a LoDValue whose single level
# [0, count] holds the real row count: a fetch cuts it back to the real rows (Paddle's result),
# row-wise consumers compute on the padding harmlessly (its rows are zeros).
def ragged(data, count) -> LoDValue:
    """``data`` padded to its capacity, of which the first ``count`` rows are real."""
    return LoDValue(data, [jnp.stack([jnp.zeros((), jnp.int32), jnp.asarray(count, jnp.int32)])])


def _where_index_shape(ctx: InferShapeContext) -> None:
    cond = ctx.input("Condition")
    ctx.set_output("Out", (-1, cond.ndim), "int64", 0)


@op("where_index", inputs="Condition", outputs="Out", infer_shape=_where_index_shape, grad=None)
def where_index(ctx):
    """The int64 coordinates [K, rank] of the K non-zero (true) elements of Condition, in row-major
    order (``paddle.nonzero``). K depends on the data: the value is padded to Condition's size
    and carries K (see docs/ops_data_dependent.md)."""
    cond = ctx.input("Condition")
    flat = cond.reshape(-1) != 0
    capacity = flat.shape[0]
    (pos,) = jnp.nonzero(flat, size=capacity, fill_value=0)
    coords = jnp.stack(jnp.unravel_index(pos, cond.shape), axis=-1) if cond.ndim else jnp.zeros((capacity, 0))
    count = jnp.sum(flat)
    valid = (jnp.arange(capacity) < count)[:, None]
    return {"Out": ragged(jnp.where(valid, coords, 0).astype(jnp.int64), count)}


def _masked_select_shape(ctx: InferShapeContext) -> None:
    x, mask = ctx.input("X"), ctx.input("Mask")
    ctx.check(mask.dtype == "bool", f"Mask must be bool, got {mask.dtype}")
    ctx.check(paddle_broadcast(x.shape, mask.shape, -1) is not None, f"X {x.shape} and Mask {mask.shape} do not broadcast")
    ctx.set_output("Y", (-1,), x.dtype, 0)


@op("masked_select", inputs="X Mask", outputs="Y", infer_shape=_masked_select_shape, no_grad_inputs=["Mask"])
def masked_select(ctx):
    """The elements of X where Mask is true (X and Mask broadcast), as a 1-D tensor in row-major
    order. Its length depends on the data: padded to the broadcast size, carrying the count."""
    x, mask = ctx.input("X"), ctx.input("Mask")
    shape = jnp.broadcast_shapes(x.shape, mask.shape)
    xs = jnp.broadcast_to(x, shape).reshape(-1)
    ms = jnp.broadcast_to(mask, shape).reshape(-1)
    (pos,) = jnp.nonzero(ms, size=xs.shape[0], fill_value=0)
    count = jnp.sum(ms)
    valid = jnp.arange(xs.shape[0]) < count
    return {"Y": ragged(jnp.where(valid, xs[pos], jnp.zeros((), x.dtype)), count)}


def _unique_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    axis = list(ctx.attr("axis") or [])
    ctx.check(len(axis) <= 1, f"unique takes at most one axis, got {axis}")
    index_dtype = dtypes.from_enum(ctx.attr("dtype"))
    ctx.check(index_dtype in ("int32", "int64"), f"dtype must be int32 or int64, got {index_dtype}")
    if axis:
        a = axis[0] % x.ndim
        ctx.check(a == 0, f"unique along axis {axis[0]} is not supported, only along axis 0 (or flattened)")
        out = tuple(-1 if i == a else d for i, d in enumerate(x.shape))
        inverse = (x.shape[a],)
    else:
        out = (-1,)
        inverse = (-1,) if any(d < 0 for d in x.shape) else (int(np.prod(x.shape)),)
    ctx.set_output("Out", out, x.dtype, 0)
    for slot in ("Indices", "Counts"):
        if ctx.has_output(slot):
            ctx.set_output(slot, (-1,), index_dtype, 0)
    if ctx.has_output("Index"):
        ctx.set_output("Index", inverse, index_dtype, 0)


@op("unique", inputs="X", outputs="Out Indices? Index Counts?",
    attrs={"return_index": False, "return_inverse": False, "return_counts": False, "axis": Attr("ints", []),
           "dtype": 3, "is_sorted": False},
    infer_shape=_unique_shape, grad=None)
def unique(ctx):
    """The distinct values of X (flattened, or the distinct slices along one ``axis``): sorted
    when ``is_sorted`` (Paddle 2.x's paddle.unique), else in order of first appearance (fluid's
    unique). Indices: where each first appears; Index: for each element, its value's position in
    Out; Counts: how often each appears. Out, Indices and Counts have data-dependent lengths:
    padded to X's size (along the axis), carrying the count."""
    x = ctx.input("X")
    index_dtype = dtypes.to_numpy(dtypes.from_enum(ctx.attr("dtype")))
    axis = [int(a) % x.ndim for a in (ctx.attr("axis") or [])]
    if axis and axis[0] != 0:
        _fail(ctx, "unique along an axis other than 0 is not supported (its padded rows would not be leading)")
    if axis:
        moved = x
        rows = moved.reshape(moved.shape[0], -1)
    else:
        moved = x.reshape(-1)
        rows = moved.reshape(-1, 1)
    n = rows.shape[0]
    # Sort rows lexicographically (stable), then mark where a new distinct row starts.
    order = jnp.lexsort(tuple(rows[:, k] for k in reversed(range(rows.shape[1])))) if rows.shape[1] else \
        jnp.arange(n)
    srt = rows[order]
    new = jnp.concatenate([jnp.ones((1,), bool), jnp.any(srt[1:] != srt[:-1], axis=1)]) if n else jnp.zeros((0,), bool)
    group = jnp.cumsum(new) - 1                               # sorted position -> distinct rank
    count = jnp.sum(new)
    inverse_sorted = jnp.zeros((n,), jnp.int32).at[order].set(group.astype(jnp.int32))
    first = jnp.full((n,), n, jnp.int32).at[group].min(order.astype(jnp.int32))   # rank -> first position
    counts = jnp.zeros((n,), jnp.int32).at[group].add(1)
    valid = jnp.arange(n) < count
    if ctx.attr("is_sorted"):
        rank_of = jnp.arange(n)                                # output slot k holds rank k
        inverse = inverse_sorted
    else:
        # Order the distinct values by first appearance.
        key = jnp.where(valid, first, n + jnp.arange(n))
        rank_of = jnp.argsort(key, stable=True)               # output slot k holds rank rank_of[k]
        slot_of_rank = jnp.zeros((n,), jnp.int32).at[rank_of].set(jnp.arange(n, dtype=jnp.int32))
        inverse = slot_of_rank[inverse_sorted]
    first_pos = jnp.where(valid, first[rank_of], 0)
    values = moved[first_pos]
    values = jnp.where(valid.reshape((-1,) + (1,) * (values.ndim - 1)), values, jnp.zeros((), x.dtype))
    out = {"Out": ragged(values, count)}
    if ctx.has_output("Index"):
        out["Index"] = inverse.astype(index_dtype)
    if ctx.has_output("Indices"):
        out["Indices"] = ragged(first_pos.astype(index_dtype), count)
    if ctx.has_output("Counts"):
        out["Counts"] = ragged(jnp.where(valid, counts[rank_of], 0).astype(index_dtype), count)
    return out


# -- more unary math ---------------------------------------------------------------------------------
_unary("expm1", lambda x, ctx: jnp.expm1(x), "exp(X) - 1, accurate near 0.")
_unary("log2", lambda x, ctx: jnp.log2(x), "Base-2 logarithm of X.")
_unary("log10", lambda x, ctx: jnp.log10(x), "Base-10 logarithm of X.")
_unary("trunc", lambda x, ctx: jnp.trunc(x), "X rounded toward zero (gradient 0).")
_unary("logsigmoid", lambda x, ctx: jax.nn.log_sigmoid(x), "log(sigmoid(X)), computed stably.")
_unary("brelu", lambda x, ctx: jnp.where(x < _const(x, ctx.attr("t_min")), _const(x, ctx.attr("t_min")),
                                         jnp.where(x > _const(x, ctx.attr("t_max")), _const(x, ctx.attr("t_max")), x)),
       "X limited to [t_min, t_max] (Hardtanh); the gradient is 1 strictly inside.", {"t_min": 0.0, "t_max": 24.0})


def _atan2_shape(ctx: InferShapeContext) -> None:
    x1, x2 = ctx.input("X1"), ctx.input("X2")
    out = paddle_broadcast(x1.shape, x2.shape, -1)
    ctx.check(out is not None, f"X1 {x1.shape} and X2 {x2.shape} do not broadcast")
    ctx.check(x1.dtype == x2.dtype, f"X1 is {x1.dtype} but X2 is {x2.dtype}")
    dtype = x1.dtype if x1.dtype in ("float16", "bfloat16", "float32", "float64") else "float64"
    ctx.set_output("Out", out, dtype, 0)


@op("atan2", inputs="X1 X2", outputs="Out", infer_shape=_atan2_shape)
def atan2(ctx):
    """The angle of the point (X2, X1): arctan(X1 / X2) in the right quadrant (integers give float64)."""
    x1, x2 = ctx.input("X1"), ctx.input("X2")
    if not jnp.issubdtype(x1.dtype, jnp.floating):
        x1, x2 = x1.astype(jnp.float64), x2.astype(jnp.float64)
    return {"Out": jnp.arctan2(x1, x2)}


# -- more reductions and shape queries -------------------------------------------------------------
def _reduce2_shape(ctx: InferShapeContext, dtype=None) -> None:
    x = ctx.input("X")
    dim = ctx.attr("dim") or []
    ctx.check(all(-max(x.ndim, 1) <= d < max(x.ndim, 1) for d in dim), f"dim {list(dim)} is out of range for "
                                                                       f"a rank-{x.ndim} input")
    axes = _axes(x.ndim, dim, ctx.attr("reduce_all"))
    keep = ctx.attr("keep_dim")
    shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape)) if keep else \
        tuple(d for i, d in enumerate(x.shape) if i not in axes)
    ctx.set_output("Out", shape, dtype or x.dtype, 0)


_REDUCE2_ATTRS = {"dim": Attr("longs", [0]), "keep_dim": False, "reduce_all": False, "in_dtype": -1, "out_dtype": -1}


def _reduce2(name: str, fn, doc: str, bool_out: bool) -> None:
    def rule(ctx):
        x = ctx.input("X")
        if ctx.input("AxisTensor") is not None or ctx.inputs("AxisTensorList"):
            _fail(ctx, "the axis given as a tensor is not supported; use the dim attribute")
        axes = _axes(x.ndim, ctx.attr("dim"), ctx.attr("reduce_all"))
        return {"Out": fn(x, axes, bool(ctx.attr("keep_dim")))}

    rule.__doc__ = doc
    rule.__name__ = name
    op(name, inputs="X AxisTensor? AxisTensorList*?", outputs="Out", attrs=_REDUCE2_ATTRS,
       infer_shape=lambda ctx: _reduce2_shape(ctx, "bool" if bool_out else None),
       no_grad_inputs=["AxisTensor", "AxisTensorList"], grad=None if bool_out else "auto")(rule)


_reduce2("reduce_any", lambda x, a, k: jnp.any(x != 0, axis=a, keepdims=k),
         "Whether any element of X over ``dim`` is true (non-zero).", True)
_reduce2("reduce_all", lambda x, a, k: jnp.all(x != 0, axis=a, keepdims=k),
         "Whether every element of X over ``dim`` is true (non-zero).", True)
_reduce2("reduce_amax", lambda x, a, k: jnp.max(x, axis=a, keepdims=k),
         "The largest element of X over ``dim``; the gradient is shared evenly among equal maxima.", False)
_reduce2("reduce_amin", lambda x, a, k: jnp.min(x, axis=a, keepdims=k),
         "The smallest element of X over ``dim``; the gradient is shared evenly among equal minima.", False)


@op("size", inputs="Input", outputs="Out", infer_shape=lambda ctx: ctx.set_output("Out", (), "int64", 0), grad=None)
def size(ctx):
    """The number of elements of Input, a 0-d int64 tensor (known from the shape alone)."""
    return {"Out": np.asarray(int(np.prod(ctx.input("Input").shape)), np.int64)}


def _unbind_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    axis = ctx.attr("axis")
    ctx.check(-x.ndim <= axis < x.ndim, f"axis {axis} is out of range for a rank-{x.ndim} X")
    axis %= x.ndim
    n = len(ctx.op.outputs.get("Out", ()))
    ctx.check(x.shape[axis] < 0 or x.shape[axis] == n, f"X has {x.shape[axis]} slices along axis {axis} but "
                                                       f"{n} outputs are named")
    for i in range(n):
        ctx.set_output("Out", x.shape[:axis] + x.shape[axis + 1:], x.dtype, 0, index=i)


@op("unbind", inputs="X", outputs="Out*", attrs={"axis": 0}, infer_shape=_unbind_shape)
def unbind(ctx):
    """The slices of X along ``axis``, that axis removed."""
    x = ctx.input("X")
    axis = int(ctx.attr("axis")) % x.ndim
    return {"Out": [jnp.squeeze(s, axis) for s in jnp.split(x, x.shape[axis], axis=axis)]}


# -- more indexing and products ----------------------------------------------------------------------
def _index_sample_shape(ctx: InferShapeContext) -> None:
    x, index = ctx.input("X"), ctx.input("Index")
    ctx.check(x.ndim == 2 and index.ndim == 2, f"X and Index must be 2-D, got {x.shape} and {index.shape}")
    ctx.check(index.dtype in ("int32", "int64"), f"Index must be int32 or int64, got {index.dtype}")
    ctx.set_output("Out", (x.shape[0] if x.shape[0] >= 0 else index.shape[0], index.shape[1]), x.dtype, 0)


@op("index_sample", inputs="X Index", outputs="Out", infer_shape=_index_sample_shape, no_grad_inputs=["Index"])
def index_sample(ctx):
    """Out[i, k] = X[i, Index[i, k]]: per row, the elements at that row's indices."""
    x, index = ctx.input("X"), ctx.input("Index")
    return {"Out": jnp.take_along_axis(x, index.astype(jnp.int32), axis=1, mode="clip")}


def _isclose_shape(ctx: InferShapeContext) -> None:
    a, b = ctx.input("Input"), ctx.input("Other")
    out = paddle_broadcast(a.shape, b.shape, -1)
    ctx.check(out is not None, f"Input {a.shape} and Other {b.shape} do not broadcast")
    ctx.set_output("Out", out, "bool", 0)


@op("isclose", inputs="Input Other Rtol? Atol?", outputs="Out",
    attrs={"rtol": "1e-05", "atol": "1e-08", "equal_nan": False}, infer_shape=_isclose_shape, grad=None)
def isclose(ctx):
    """|Input - Other| <= atol + rtol · |Other| elementwise (bool); NaNs equal when ``equal_nan``.
    The tolerances are strings (Paddle keeps their full precision) or one-element tensors."""
    a, b = ctx.input("Input"), ctx.input("Other")
    tol = {}
    for slot, attr in (("Rtol", "rtol"), ("Atol", "atol")):
        t = ctx.input(slot)
        tol[attr] = t.reshape(()).astype(a.dtype) if t is not None else jnp.asarray(float(ctx.attr(attr)), a.dtype)
    # Paddle's kernel: NaNs are close only to NaNs (and only with equal_nan); otherwise equal, or
    # within atol + rtol·|Other|, or within 1e-15 of that bound.
    left = jnp.abs(a - b)
    right = tol["atol"] + tol["rtol"] * jnp.abs(b)
    close = (a == b) | (left <= right) | (jnp.abs(left - right) <= 1e-15)
    nan_a, nan_b = jnp.isnan(a), jnp.isnan(b)
    both_nan = bool(ctx.attr("equal_nan")) & nan_a & nan_b
    return {"Out": jnp.where(nan_a | nan_b, both_nan, close)}


@op("kron", inputs="X Y", outputs="Out", infer_shape=None)
def kron(ctx):
    """The Kronecker product of X and Y (the lower-rank one gets leading 1s)."""
    return {"Out": jnp.kron(ctx.input("X"), ctx.input("Y"))}


def _repeat_count(ctx, x, axis: int):
    tensor = ctx.input("RepeatsTensor")
    if tensor is None:
        return int(ctx.attr("Repeats"))
    try:
        repeats = static_ints(ctx, "RepeatsTensor", what="RepeatsTensor")
    except OpRuntimeError:
        var = ctx.out_var("Out")
        if var is None or var.shape[axis] < 0:
            raise
        # The program declares the output's length: repeats are data, the total is static.
        return tensor.reshape(-1), int(var.shape[axis])
    return (repeats[0] if len(repeats) == 1 else np.asarray(repeats)), None


def _repeat_interleave_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    dim = ctx.attr("dim")
    ctx.check(-x.ndim <= dim < x.ndim, f"dim {dim} is out of range for a rank-{x.ndim} X")
    dim %= x.ndim
    shape = list(x.shape)
    if ctx.input("RepeatsTensor") is not None:
        shape[dim] = -1
    elif shape[dim] >= 0:
        shape[dim] *= int(ctx.attr("Repeats"))
    ctx.set_output("Out", shape, x.dtype, 0)


@op("repeat_interleave", inputs="X RepeatsTensor?", outputs="Out", attrs={"Repeats": 0, "dim": 0},
    infer_shape=_repeat_interleave_shape, no_grad_inputs=["RepeatsTensor"])
def repeat_interleave(ctx):
    """Each slice of X along ``dim`` repeated ``Repeats`` times in place (or RepeatsTensor[i] times
    for slice i: the total must be known when the block is lowered)."""
    x = ctx.input("X")
    dim = int(ctx.attr("dim")) % x.ndim
    count = _repeat_count(ctx, x, dim)
    if isinstance(count, int):
        return {"Out": jnp.repeat(x, count, axis=dim)}
    repeats, total = count
    return {"Out": jnp.repeat(x, repeats, axis=dim, total_repeat_length=total)}


def _diag_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    k = ctx.attr("offset")
    ctx.check(x.ndim in (0, 1, 2), f"X must be 1-D or 2-D, got {x.shape}")
    if x.ndim <= 1:
        n = (x.shape[0] if x.ndim else 1)
        n = n + abs(k) if n >= 0 else -1
        ctx.set_output("Out", (n, n), x.dtype, 0)
    else:
        h, w = x.shape
        if h < 0 or w < 0:
            ctx.set_output("Out", (-1,), x.dtype, 0)
        else:
            ctx.set_output("Out", (max(0, min(h, w - k) if k >= 0 else min(h + k, w)),), x.dtype, 0)


@op("diag_v2", inputs="X", outputs="Out", attrs={"offset": 0, "padding_value": 0.0}, infer_shape=_diag_shape)
def diag_v2(ctx):
    """A 1-D X becomes a square matrix with X on diagonal ``offset`` (the rest ``padding_value``); a
    2-D X gives its diagonal ``offset`` as a vector."""
    x = ctx.input("X")
    k = int(ctx.attr("offset"))
    if x.ndim <= 1:
        x = x.reshape(-1)
        n = x.shape[0] + abs(k)
        on = jnp.eye(n, k=k, dtype=bool)
        return {"Out": jnp.where(on, jnp.diag(x, k), jnp.asarray(ctx.attr("padding_value"), x.dtype))}
    return {"Out": jnp.diagonal(x, offset=k)}


def _linspace_shape(ctx: InferShapeContext) -> None:
    # The length is the *value* of Num: known here only when the program declares it.
    out = ctx.output("Out")
    n = out.shape[0] if out is not None and len(out.shape) == 1 else -1
    ctx.set_output("Out", (n,), dtypes.from_enum(ctx.attr("dtype")), 0)


@op("linspace", inputs="Start Stop Num", outputs="Out", attrs={"dtype": 5}, infer_shape=_linspace_shape, grad=None)
def linspace(ctx):
    """Num evenly spaced values from Start to Stop (both included), of ``dtype``; the first half
    counts up from Start and the second down from Stop, as Paddle's kernel does. Num sets the
    output's length, so its value must be known when the block is lowered (or the program must
    declare the length)."""
    dtype = dtypes.to_numpy(dtypes.from_enum(ctx.attr("dtype")))
    try:
        (num,) = static_ints(ctx, "Num", what="Num")
    except OpRuntimeError:
        var = ctx.out_var("Out")
        if var is None or len(var.shape) != 1 or var.shape[0] < 0:
            raise
        num = int(var.shape[0])
    work = jnp.float64 if dtype == np.float64 else jnp.float32
    start = ctx.input("Start").reshape(()).astype(work)
    stop = ctx.input("Stop").reshape(()).astype(work)
    if num == 1:
        return {"Out": start.reshape(1).astype(dtype)}
    step = (stop - start) / (num - 1)
    i = jnp.arange(num, dtype=work)
    out = jnp.where(i < num // 2, start + step * i, stop - step * (num - 1 - i))
    return {"Out": out.astype(dtype)}
