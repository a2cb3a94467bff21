"""Creating and reshaping tensors: constants, padding, string fills."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from ...ir import dtypes
from ...ir.registry import Attr, op
from ...ir.shape import InferShapeContext


def _fill_shape(ctx: InferShapeContext) -> None:
    ctx.set_output("Out", ctx.attr("shape"), dtypes.from_enum(ctx.attr("dtype")), 0)


@op("fill_constant", inputs="ValueTensor? ShapeTensor? ShapeTensorList*?", outputs="Out",
    attrs={"dtype": 5, "shape": Attr("longs", []), "value": 0.0, "str_value": "", "force_cpu": False,
           "place_type": -1},
    infer_shape=_fill_shape, grad=None)
def fill_constant(ctx):
    """A tensor of ``shape`` filled with ``value`` (``str_value`` wins when set, keeping precision)."""
    dtype = dtypes.to_numpy(dtypes.from_enum(ctx.attr("dtype")))
    text = ctx.attr("str_value")
    value = ctx.attr("value")
    if text:
        value = int(text) if np.issubdtype(dtype, np.integer) else float(text)
    if ctx.input("ValueTensor") is not None:
        value = ctx.input("ValueTensor").reshape(())
    return {"Out": jnp.full(tuple(ctx.attr("shape")), value, dtype)}


def _pad_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    pads = ctx.attr("paddings")
    ctx.check(len(pads) == 2 * x.ndim, f"paddings needs 2 values per dim of X ({2 * x.ndim}), got {pads}")
    shape = [d + pads[2 * i] + pads[2 * i + 1] if d >= 0 else -1 for i, d in enumerate(x.shape)]
    ctx.set_output("Out", shape, x.dtype, x.lod_level)


@op("pad", inputs="X", outputs="Out", attrs={"paddings": Attr("ints", []), "pad_value": 0.0},
    infer_shape=_pad_shape)
def pad(ctx):
    """X padded with ``pad_value``: ``paddings`` gives (before, after) for every dim."""
    x = ctx.input("X")
    p = ctx.attr("paddings")
    widths = [(p[2 * i], p[2 * i + 1]) for i in range(x.ndim)]
    return {"Out": jnp.pad(x, widths, constant_values=jnp.asarray(ctx.attr("pad_value"), x.dtype))}


def _string_shape(ctx: InferShapeContext) -> None:
    pass


@op("fill_string", inputs="", outputs="Out", attrs={"value": ""}, infer_shape=_string_shape, host=True)
def fill_string(op, scope):
    """fluidjax's op that gives a string variable its value (strings never enter XLA).

    Runs on the host, outside ``jax.jit``; Paddle has no op of this kind.
    """
    for name in op.output("Out"):
        holder = scope.find_var(name) or scope.var(name)
        holder.set(str(op.attr("value")))
