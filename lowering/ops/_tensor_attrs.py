"""Attributes given as tensors.

Several Paddle ops take a *tensor* form of an attribute (``Shape``/``ShapeTensor`` of
``reshape2``, ``StartsTensor`` of ``slice``, ``AxisTensor`` of ``concat``, ...). Inside
``jax.jit`` those tensors are tracers whose values are unknown while the computation is built,
but XLA needs static shapes. The slots are declared (programs saved by Paddle use them) and the
JAX rules use their values when they are concrete; where the program declares the output's
shape (a program loaded from Paddle does) ``reshape2`` and ``expand_v2`` fall back to it.
Otherwise the rule raises a clear error: use the attribute form.
"""

from __future__ import annotations

import jax
import numpy as np

from ...ir.errors import OpRuntimeError


def static_ints(ctx, *slots: str, what: str) -> list[int] | None:
    """The integer values of tensor-input slots, when they are concrete (None if all are empty).

    Several slots are concatenated (``ShapeTensor`` then a list slot). Raises a clear error when
    the values are only known at run time (a tracer inside ``jax.jit``).
    """
    values = [v for s in slots for v in ctx.inputs(s)]
    if not values:
        return None
    out: list[int] = []
    for v in values:
        if isinstance(v, jax.core.Tracer):
            raise OpRuntimeError(
                f"op {ctx.opdef.type!r}: {what} given as a tensor is only known at run time, but XLA needs "
                f"static shapes; give it as the attribute instead (the layer functions do for Python ints)")
        out.extend(int(i) for i in np.asarray(v).reshape(-1))
    return out
