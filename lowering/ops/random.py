"""Random initial values. An op's non-zero ``seed`` attribute fixes its numbers (Paddle's rule);
otherwise the Executor derives a key from the program's ``random_seed`` and the op's position."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ...ir import dtypes
from ...ir.registry import Attr, op
from ...ir.shape import InferShapeContext
from ..host_init import float_kind, host_rule
from ._tensor_attrs import static_ints
from .tensor import _batch_like_shape, _batch_like_target


def _random_shape(ctx: InferShapeContext) -> None:
    ctx.set_output("Out", ctx.attr("shape"), dtypes.from_enum(ctx.attr("dtype")), 0)


def _shape(ctx) -> tuple:
    """The shape: ``ShapeTensor`` / ``ShapeTensorList`` when given (concrete at trace), else the attribute."""
    shape = static_ints(ctx, "ShapeTensor", "ShapeTensorList", what="the shape")
    return tuple(shape if shape is not None else ctx.attr("shape"))


def _dtype(ctx):
    return dtypes.to_numpy(dtypes.from_enum(ctx.attr("dtype")))


@op("uniform_random", inputs="ShapeTensor? ShapeTensorList*?", outputs="Out",
    attrs={"shape": Attr("longs", []), "dtype": 5, "min": -1.0, "max": 1.0, "seed": 0, "diag_num": 0,
           "diag_step": 0, "diag_val": 1.0},
    infer_shape=_random_shape, random=True)
def uniform_random(ctx):
    """Uniform numbers in [min, max)."""
    out = jax.random.uniform(ctx.rng(), _shape(ctx), _dtype(ctx),
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
    z = jax.random.normal(ctx.rng(), _shape(ctx), _dtype(ctx))
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


# -- Fluid 1.x's other random ops ------------------------------------------------------------------
@op("uniform_random_batch_size_like", inputs="Input", outputs="Out",
    attrs={"shape": Attr("ints", []), "input_dim_idx": 0, "output_dim_idx": 0, "min": -1.0, "max": 1.0,
           "seed": 0, "diag_num": 0, "diag_step": 0, "diag_val": 1.0, "dtype": 5},
    infer_shape=_batch_like_shape, random=True, grad=None)
def uniform_random_batch_size_like(ctx):
    """uniform_random of ``shape`` whose dim ``output_dim_idx`` is Input's dim ``input_dim_idx``."""
    shape = tuple(_batch_like_target(ctx, ctx.input("Input").shape))
    out = jax.random.uniform(ctx.rng(), shape, _dtype(ctx), ctx.attr("min"), ctx.attr("max"))
    n, step, val = ctx.attr("diag_num"), ctx.attr("diag_step"), ctx.attr("diag_val")
    if n > 0:
        out = out.reshape(-1).at[jnp.arange(n) * (step + 1)].set(val).reshape(shape)
    return {"Out": out}


# Fluid 1.x's op (Paddle 2.6 no longer registers it).
@op("gaussian_random_batch_size_like", inputs="Input", outputs="Out",
    attrs={"shape": Attr("ints", []), "input_dim_idx": 0, "output_dim_idx": 0, "mean": 0.0, "std": 1.0,
           "seed": 0, "dtype": 5},
    infer_shape=_batch_like_shape, random=True, grad=None)
def gaussian_random_batch_size_like(ctx):
    """gaussian_random of ``shape`` whose dim ``output_dim_idx`` is Input's dim ``input_dim_idx``."""
    shape = tuple(_batch_like_target(ctx, ctx.input("Input").shape))
    return {"Out": jax.random.normal(ctx.rng(), shape, _dtype(ctx)) * ctx.attr("std") + ctx.attr("mean")}


def _randperm_shape(ctx: InferShapeContext) -> None:
    ctx.check(ctx.attr("n") > 0, f"randperm needs n > 0, got {ctx.attr('n')}")
    ctx.set_output("Out", (ctx.attr("n"),), dtypes.from_enum(ctx.attr("dtype")), 0)


@op("randperm", inputs="", outputs="Out", attrs={"n": 0, "dtype": 3}, infer_shape=_randperm_shape,
    random=True, grad=None)
def randperm(ctx):
    """A random permutation of 0 .. n-1."""
    return {"Out": jax.random.permutation(ctx.rng(), ctx.attr("n")).astype(_dtype(ctx))}


def _sampling_id_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    ctx.check(x.ndim == 2, f"sampling_id needs X [batch, classes], got {x.shape}")
    ctx.set_output("Out", (x.shape[0],), "int64", 0)


@op("sampling_id", inputs="X", outputs="Out", attrs={"min": 0.0, "max": 1.0, "seed": 0},
    infer_shape=_sampling_id_shape, random=True, grad=None)
def sampling_id(ctx):
    """One class per row of probabilities X: r ~ U[min, max), the first column whose running sum
    exceeds r (the last column when none does), as Paddle's kernel walks the row."""
    x = ctx.input("X")
    r = jax.random.uniform(ctx.rng(), (x.shape[0], 1), x.dtype, ctx.attr("min"), ctx.attr("max"))
    above = jnp.cumsum(x, axis=1) > r
    idx = jnp.where(above.any(1), jnp.argmax(above, axis=1), x.shape[1] - 1)
    return {"Out": idx.astype(jnp.int64)}


def _random_crop_shape(ctx: InferShapeContext) -> None:
    x, shape = ctx.input("X"), list(ctx.attr("shape"))
    ctx.check(0 < len(shape) <= x.ndim and all(s < 0 or c <= s for c, s in zip(shape, x.shape[x.ndim - len(shape):])),
              f"random_crop's shape {shape} does not fit X {x.shape}")
    ctx.set_output("Out", tuple(x.shape[:x.ndim - len(shape)]) + tuple(shape), x.dtype, 0)
    ctx.set_output("SeedOut", (1,), "int64", 0)


# Fluid 1.x's op (Paddle 2.6 no longer registers it). Fluid threads a persistable seed tensor
# (Seed -> SeedOut); here the offsets come from the run's key, as every random op's numbers do.
@op("random_crop", inputs="X Seed?", outputs="Out SeedOut?", attrs={"shape": Attr("ints", []), "startup_seed": 0},
    infer_shape=_random_crop_shape, random=True, no_grad_inputs=["Seed"], no_grad_outputs=["SeedOut"])
def random_crop(ctx):
    """Each instance (the leading dims of X) cropped to ``shape`` (its last dims) at offsets drawn
    uniformly among the positions where the crop fits."""
    x, shape = ctx.input("X"), tuple(ctx.attr("shape"))
    lead, tail = x.shape[:x.ndim - len(shape)], x.shape[x.ndim - len(shape):]
    flat = x.reshape((-1,) + tail)
    keys = jax.random.split(ctx.rng(), len(shape))
    starts = [jax.random.randint(k, (flat.shape[0],), 0, t - c + 1) for k, t, c in zip(keys, tail, shape)]

    def crop(inst, *begin):
        return lax.dynamic_slice(inst, begin, shape)

    out = jax.vmap(crop)(flat, *starts).reshape(lead + shape)
    return {"Out": out, "SeedOut": starts[0][:1].astype(jnp.int64)}
