"""Neural-network ops: matrix products, softmax, losses."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ...ir.registry import op
from ...ir.shape import InferShapeContext, same_as
from ._shapes import dims_equal, prod


def _mul_shape(ctx: InferShapeContext) -> None:
    x, y = ctx.input("X"), ctx.input("Y")
    xn, yn = ctx.attr("x_num_col_dims"), ctx.attr("y_num_col_dims")
    ctx.check(0 < xn < x.ndim + 1 and 0 < yn < y.ndim + 1,
              f"x_num_col_dims={xn} / y_num_col_dims={yn} do not fit ranks {x.ndim} and {y.ndim}")
    k_x, k_y = prod(x.shape[xn:]), prod(y.shape[:yn])
    ctx.check(dims_equal(k_x, k_y), f"X flattens to [*, {k_x}] but Y to [{k_y}, *]: inner sizes differ")
    ctx.check(x.dtype == y.dtype, f"X is {x.dtype} but Y is {y.dtype}")
    ctx.set_output("Out", x.shape[:xn] + y.shape[yn:], x.dtype, x.lod_level)


@op("mul", inputs="X Y", outputs="Out", attrs={"x_num_col_dims": 1, "y_num_col_dims": 1},
    infer_shape=_mul_shape)
def mul(ctx):
    """Out = X·Y with X flattened to 2-D at ``x_num_col_dims`` and Y at ``y_num_col_dims``."""
    x, y = ctx.input("X"), ctx.input("Y")
    xn, yn = ctx.attr("x_num_col_dims"), ctx.attr("y_num_col_dims")
    x2 = x.reshape(_flat(x.shape, xn))
    y2 = y.reshape(_flat(y.shape, yn))
    return {"Out": (x2 @ y2).reshape(tuple(x.shape[:xn]) + tuple(y.shape[yn:]))}


def _flat(shape, n):
    rows, cols = 1, 1
    for d in shape[:n]:
        rows = rows * d
    for d in shape[n:]:
        cols = cols * d
    return (rows, cols)


@op("softmax", inputs="X", outputs="Out", attrs={"axis": -1}, infer_shape=same_as("X"))
def softmax(ctx):
    """exp(X) / sum(exp(X)) along ``axis``."""
    return {"Out": jax.nn.softmax(ctx.input("X"), axis=ctx.attr("axis"))}


def _cross_entropy_shape(ctx: InferShapeContext) -> None:
    x, label = ctx.input("X"), ctx.input("Label")
    soft = ctx.attr("soft_label")
    ctx.check(x.ndim == label.ndim, f"X has rank {x.ndim} but Label rank {label.ndim}")
    for a, b in zip(x.shape[:-1], label.shape[:-1]):
        ctx.check(dims_equal(a, b), f"X {x.shape} and Label {label.shape} differ before the last dim")
    if soft:
        ctx.check(dims_equal(x.shape[-1], label.shape[-1]),
                  f"soft_label=True needs Label's last dim ({label.shape[-1]}) to equal the number of "
                  f"classes, X's last dim ({x.shape[-1]})")
        ctx.check(label.dtype == x.dtype, f"a soft Label must have X's dtype {x.dtype}, got {label.dtype}")
    else:
        ctx.check(dims_equal(label.shape[-1], 1),
                  f"hard labels (soft_label=False) need Label's last dim to be 1, got {label.shape}")
        ctx.check(label.dtype in ("int64", "int32"), f"hard labels must be int64 or int32, got {label.dtype}")
    ctx.set_output("Y", x.shape[:-1] + (1,), x.dtype, x.lod_level)


@op("cross_entropy", inputs="X Label", outputs="Y", attrs={"soft_label": False, "ignore_index": -100},
    infer_shape=_cross_entropy_shape, no_grad_inputs=["Label"])
def cross_entropy(ctx):
    """-log(X[label]) for hard labels, -sum(label * log(X)) for soft ones; X holds probabilities."""
    x, label = ctx.input("X"), ctx.input("Label")
    if ctx.attr("soft_label"):
        return {"Y": -jnp.sum(label * jnp.log(x), axis=-1, keepdims=True)}
    picked = jnp.take_along_axis(x, jnp.clip(label, 0, x.shape[-1] - 1).astype(jnp.int32), axis=-1)
    loss = -jnp.log(picked)
    return {"Y": jnp.where(label == ctx.attr("ignore_index"), jnp.zeros_like(loss), loss)}
