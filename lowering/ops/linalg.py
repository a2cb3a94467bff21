"""Linear algebra beyond ``matmul``/``mul`` (those are in ``nn.py``): batched products (bmm),
einsum, kron, addmm, cross; norms (p_norm, dist); triangles and diagonals of matrices (tril_triu, diag_v2, trace,
diag_embed).

Each op follows its Paddle 2.6.2 kernel (type name, slots, attributes, semantics); gradients are
the vjp of the JAX rule.
"""

from __future__ import annotations

import string

import jax
import jax.numpy as jnp
import numpy as np

from ...ir import dtypes
from ...ir.registry import op
from ...ir.shape import InferShapeContext, same_as
from .math import _numpy_broadcast_shape


# -- products --------------------------------------------------------------------------------------
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


@op("kron", inputs="X Y", outputs="Out", infer_shape=None)
def kron(ctx):
    """The Kronecker product of X and Y (the lower-rank one gets leading 1s)."""
    return {"Out": jnp.kron(ctx.input("X"), ctx.input("Y"))}


# -- norms -----------------------------------------------------------------------------------------
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


# -- triangles and diagonals -----------------------------------------------------------------------
@op("tril_triu", inputs="X", outputs="Out", attrs={"diagonal": 0, "lower": True}, infer_shape=same_as("X"))
def tril_triu(ctx):
    """The lower (``lower``) or upper triangle of the last two dims of X, from the ``diagonal``-th
    diagonal (0 main, > 0 above it, < 0 below it); the rest is 0."""
    x = ctx.input("X")
    k = int(ctx.attr("diagonal"))
    return {"Out": jnp.tril(x, k) if ctx.attr("lower") else jnp.triu(x, k)}


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


# -- Fluid 1.8's cross, trace, addmm, diag_embed -----------------------------------------------------
@op("cross", inputs="X Y", outputs="Out", attrs={"dim": 2**31 - 1}, infer_shape=same_as("X"))
def cross(ctx):
    """The cross product of X and Y along ``dim`` (size 3); the default picks the first dim of size 3."""
    x, y = ctx.input("X"), ctx.input("Y")
    dim = ctx.attr("dim")
    if dim == 2**31 - 1:
        dim = next((i for i, d in enumerate(x.shape) if d == 3), -1)
    if dim < -x.ndim or dim >= x.ndim or x.shape[dim] != 3:
        raise ValueError(f"op 'cross': dim {ctx.attr('dim')} of X {x.shape} must have size 3")
    return {"Out": jnp.cross(x, y, axis=dim)}


@op("trace", inputs="Input", outputs="Out", attrs={"offset": 0, "axis1": 0, "axis2": 1}, infer_shape=None)
def trace(ctx):
    """The sum of Input's diagonal ``offset`` in the plane of axis1 and axis2 (those dims removed)."""
    return {"Out": jnp.trace(ctx.input("Input"), offset=ctx.attr("offset"), axis1=ctx.attr("axis1"),
                             axis2=ctx.attr("axis2"))}


@op("addmm", inputs="Input X Y", outputs="Out", attrs={"Alpha": 1.0, "Beta": 1.0}, infer_shape=None)
def addmm(ctx):
    """Beta·Input + Alpha·(X @ Y), Input broadcast to the product's [M, N]."""
    x = ctx.input("X")
    alpha, beta = (jnp.asarray(ctx.attr(k), x.dtype) for k in ("Alpha", "Beta"))
    return {"Out": beta * ctx.input("Input") + alpha * (x @ ctx.input("Y"))}


@op("diag_embed", inputs="Input", outputs="Out", attrs={"offset": 0, "dim1": -2, "dim2": -1}, infer_shape=None,
    grad=None)
def diag_embed(ctx):
    """Matrices whose diagonal ``offset`` (in the plane of dims dim1, dim2 of the output) holds the
    last dim of Input; zeros elsewhere."""
    x = ctx.input("Input")
    offset, n = ctx.attr("offset"), x.shape[-1] + abs(ctx.attr("offset"))
    rank = x.ndim + 1
    d1, d2 = ctx.attr("dim1") % rank, ctx.attr("dim2") % rank
    i = jnp.arange(x.shape[-1])
    rows, cols = (i, i + offset) if offset >= 0 else (i - offset, i)
    square = jnp.zeros(x.shape[:-1] + (n, n), x.dtype).at[..., rows, cols].set(x)
    # square is [..., n(d1), n(d2)] with the batch dims first; move the two to their places
    batch = [k for k in range(rank) if k not in (d1, d2)]
    order = batch + [d1, d2] if d1 < d2 else batch + [d2, d1]
    if d1 > d2:
        square = jnp.swapaxes(square, -1, -2)
    return {"Out": jnp.transpose(square, np.argsort(order))}


# -- Fluid 1.x's feature products ------------------------------------------------------------------
def _bilinear_shape(ctx: InferShapeContext) -> None:
    x, y, w = ctx.input("X"), ctx.input("Y"), ctx.input("Weight")
    ctx.check(x.ndim == 2 and y.ndim == 2 and w.ndim == 3,
              f"bilinear_tensor_product needs 2-D X and Y and a 3-D Weight, got {x.shape}, {y.shape}, {w.shape}")
    ctx.check((w.shape[1] < 0 or x.shape[1] < 0 or w.shape[1] == x.shape[1])
              and (w.shape[2] < 0 or y.shape[1] < 0 or w.shape[2] == y.shape[1]),
              f"Weight {w.shape} does not fit X {x.shape} and Y {y.shape}")
    ctx.set_output("Out", (x.shape[0], w.shape[0]), x.dtype, x.lod_level)


@op("bilinear_tensor_product", inputs="X Y Weight Bias?", outputs="Out", infer_shape=_bilinear_shape)
def bilinear_tensor_product(ctx):
    """Out[b, i] = X[b] @ Weight[i] @ Y[b] (+ Bias[0, i])."""
    x, y, w = ctx.input("X"), ctx.input("Y"), ctx.input("Weight")
    out = jnp.einsum("bm,imn,bn->bi", x, w, y)
    if ctx.has_input("Bias"):
        out = out + ctx.input("Bias").reshape(1, -1)
    return {"Out": out}


def _fsp_shape(ctx: InferShapeContext) -> None:
    x, y = ctx.input("X"), ctx.input("Y")
    ctx.check(x.ndim == 4 and y.ndim == 4, f"fsp needs 4-D X and Y, got {x.shape} and {y.shape}")
    ctx.check(all(a < 0 or b < 0 or a == b for a, b in zip(x.shape[2:], y.shape[2:])),
              f"X {x.shape} and Y {y.shape} must have the same height and width")
    ctx.set_output("Out", (x.shape[0], x.shape[1], y.shape[1]), x.dtype, 0)


@op("fsp", inputs="X Y", outputs="Out", infer_shape=_fsp_shape)
def fsp(ctx):
    """The flow of solution procedure matrix: Out[b] = X[b] (C1 x HW) @ Y[b]^T (HW x C2) / (H * W)."""
    x, y = ctx.input("X"), ctx.input("Y")
    b, c1, h, w = x.shape
    out = jnp.einsum("bik,bjk->bij", x.reshape(b, c1, h * w), y.reshape(b, y.shape[1], h * w))
    return {"Out": out / (h * w)}
