"""Random initial values. An op's non-zero ``seed`` attribute fixes its numbers (Paddle's rule);
otherwise the Executor derives a key from the program's ``random_seed`` and the op's position."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ...ir import dtypes
from ...ir.registry import Attr, op
from ...ir.shape import InferShapeContext


def _random_shape(ctx: InferShapeContext) -> None:
    ctx.set_output("Out", ctx.attr("shape"), dtypes.from_enum(ctx.attr("dtype")), 0)


def _dtype(ctx):
    return dtypes.to_numpy(dtypes.from_enum(ctx.attr("dtype")))


@op("uniform_random", inputs="ShapeTensor? ShapeTensorList*?", outputs="Out",
    attrs={"shape": Attr("longs", []), "dtype": 5, "min": -1.0, "max": 1.0, "seed": 0, "diag_num": 0,
           "diag_step": 0, "diag_val": 1.0},
    infer_shape=_random_shape, random=True)
def uniform_random(ctx):
    """Uniform numbers in [min, max)."""
    out = jax.random.uniform(ctx.rng(), tuple(ctx.attr("shape")), _dtype(ctx),
                             ctx.attr("min"), ctx.attr("max"))
    n, step, val = ctx.attr("diag_num"), ctx.attr("diag_step"), ctx.attr("diag_val")
    if n > 0:
        flat = out.reshape(-1)
        idx = jnp.arange(n) * (step + 1)
        out = flat.at[idx].set(val).reshape(out.shape)
    return {"Out": out}


@op("gaussian_random", inputs="ShapeTensor? ShapeTensorList*?", outputs="Out",
    attrs={"shape": Attr("longs", []), "mean": 0.0, "std": 1.0, "seed": 0, "dtype": 5},
    infer_shape=_random_shape, random=True)
def gaussian_random(ctx):
    """Normal numbers with ``mean`` and ``std``."""
    z = jax.random.normal(ctx.rng(), tuple(ctx.attr("shape")), _dtype(ctx))
    return {"Out": z * ctx.attr("std") + ctx.attr("mean")}


@op("truncated_gaussian_random", inputs="", outputs="Out",
    attrs={"shape": Attr("ints", []), "mean": 0.0, "std": 1.0, "seed": 0, "dtype": 5},
    infer_shape=_random_shape, random=True)
def truncated_gaussian_random(ctx):
    """Normal numbers with ``mean`` and ``std``, redrawn outside two standard deviations."""
    z = jax.random.truncated_normal(ctx.rng(), -2.0, 2.0, tuple(ctx.attr("shape")), _dtype(ctx))
    return {"Out": z * ctx.attr("std") + ctx.attr("mean")}


def _randint_shape(ctx: InferShapeContext) -> None:
    low, high = ctx.attr("low"), ctx.attr("high")
    ctx.check(low < high, f"randint needs low < high, got low={low}, high={high}")
    dtype = dtypes.from_enum(ctx.attr("dtype"))
    ctx.check(dtype in ("int32", "int64"), f"randint's dtype must be int32 or int64, got {dtype}")
    ctx.set_output("Out", ctx.attr("shape"), dtype, 0)


@op("randint", inputs="ShapeTensor? ShapeTensorList*?", outputs="Out",
    attrs={"low": 0, "high": 0, "shape": Attr("longs", []), "dtype": 3, "seed": 0},
    infer_shape=_randint_shape, random=True)
def randint(ctx):
    """Integers drawn uniformly from [low, high) (``dtype`` int32 or int64)."""
    low, high = ctx.attr("low"), ctx.attr("high")
    return {"Out": jax.random.randint(ctx.rng(), tuple(ctx.attr("shape")), low, high, _dtype(ctx))}
