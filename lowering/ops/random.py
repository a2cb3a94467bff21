"""Random initial values. An op's non-zero ``seed`` attribute fixes its numbers (Paddle's rule);
otherwise the Executor derives a key from the program's ``random_seed`` and the op's position."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ...ir import dtypes
from ...ir.registry import Attr, op
from ...ir.shape import InferShapeContext
from ..host_init import float_kind, host_rule


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


@host_rule("uniform_random")
def _uniform_random_host(ctx):
    dtype = ctx.dtype()
    lo, hi = ctx.attr("min"), ctx.attr("max")
    out = ctx.rng().random(ctx.shape(), float_kind(dtype))
    out *= hi - lo                                # in place: one pass each, no temporaries
    out += lo
    out = out.astype(dtype, copy=False)
    n, step, val = ctx.attr("diag_num"), ctx.attr("diag_step"), ctx.attr("diag_val")
    if n > 0:
        out.reshape(-1)[np.arange(n) * (step + 1)] = val
    return out


@op("gaussian_random", inputs="ShapeTensor? ShapeTensorList*?", outputs="Out",
    attrs={"shape": Attr("longs", []), "mean": 0.0, "std": 1.0, "seed": 0, "dtype": 5},
    infer_shape=_random_shape, random=True)
def gaussian_random(ctx):
    """Normal numbers with ``mean`` and ``std``."""
    z = jax.random.normal(ctx.rng(), tuple(ctx.attr("shape")), _dtype(ctx))
    return {"Out": z * ctx.attr("std") + ctx.attr("mean")}


@host_rule("gaussian_random")
def _gaussian_random_host(ctx):
    dtype = ctx.dtype()
    z = ctx.rng().standard_normal(ctx.shape(), float_kind(dtype))
    z *= ctx.attr("std")
    z += ctx.attr("mean")
    return z.astype(dtype, copy=False)


@op("truncated_gaussian_random", inputs="", outputs="Out",
    attrs={"shape": Attr("ints", []), "mean": 0.0, "std": 1.0, "seed": 0, "dtype": 5},
    infer_shape=_random_shape, random=True)
def truncated_gaussian_random(ctx):
    """Normal numbers with ``mean`` and ``std``, redrawn outside two standard deviations."""
    z = jax.random.truncated_normal(ctx.rng(), -2.0, 2.0, tuple(ctx.attr("shape")), _dtype(ctx))
    return {"Out": z * ctx.attr("std") + ctx.attr("mean")}


@host_rule("truncated_gaussian_random")
def _truncated_gaussian_random_host(ctx):
    dtype, rng = ctx.dtype(), ctx.rng()
    z = rng.standard_normal(ctx.shape(), float_kind(dtype))
    outside = np.abs(z) > 2.0
    while outside.any():                      # redraw until every value lies within two std devs
        z[outside] = rng.standard_normal(int(outside.sum()), float_kind(dtype))
        outside = np.abs(z) > 2.0
    z *= ctx.attr("std")
    z += ctx.attr("mean")
    return z.astype(dtype, copy=False)


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


@host_rule("randint")
def _randint_host(ctx):
    return ctx.rng().integers(ctx.attr("low"), ctx.attr("high"), ctx.shape(), dtype=ctx.dtype())


def _seed_shape(ctx: InferShapeContext) -> None:
    ctx.set_output("Out", (1,), "int32", 0)


# Paddle 2.6 declares only ``seed``; ``deterministic``, ``rng_name`` and ``force_cpu`` are its extras.
@op("seed", inputs="", outputs="Out", attrs={"seed": 0},
    infer_shape=_seed_shape, random=True)
def seed(ctx):
    """A seed for ops that take one as input (``dropout``'s ``Seed``): the ``seed`` attribute when
    non-zero, otherwise a number drawn from the run's key (a new one every run)."""
    fixed = int(ctx.attr("seed") or 0)
    if fixed:
        return {"Out": jnp.full((1,), fixed, jnp.int32)}
    return {"Out": jax.random.randint(ctx.rng(), (1,), 1, 2**31 - 1, jnp.int32)}
