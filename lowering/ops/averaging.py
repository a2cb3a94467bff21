"""Parameter averaging: ``average_accumulates``, the op behind Fluid's ``ModelAverage``.

It keeps a sliding window of parameter sums in three buffers, as Paddle's kernel does: ``sum_1``
collects the recent parameters, moves into ``sum_2`` every 16384 updates (so that a long sum of
floats loses no precision), and both move into ``sum_3`` when the window is full (then the
counters restart). The average over the window is ``(sum_1 + sum_2 + sum_3) /
(num_accumulates + old_num_accumulates)``; ``ModelAverage.apply`` computes it with ordinary ops.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from ...ir.registry import Attr, op
from ...ir.shape import InferShapeContext

# Paddle's kMaxNumAccumulates: sum_1 moves into sum_2 after this many updates.
MAX_NUM_ACCUMULATES = 16384

_PAIRS = (("out_sum_1", "in_sum_1"), ("out_sum_2", "in_sum_2"), ("out_sum_3", "in_sum_3"),
          ("out_num_accumulates", "in_num_accumulates"), ("out_old_num_accumulates", "in_old_num_accumulates"),
          ("out_num_updates", "in_num_updates"))


def _shapes(ctx: InferShapeContext) -> None:
    for out, src in _PAIRS:
        info = ctx.input(src)
        if info is not None:
            ctx.set_output(out, info.shape, info.dtype, 0)


@op("average_accumulates",
    inputs="param in_sum_1 in_sum_2 in_sum_3 in_num_accumulates in_old_num_accumulates in_num_updates",
    outputs="out_sum_1 out_sum_2 out_sum_3 out_num_accumulates out_old_num_accumulates out_num_updates",
    attrs={"average_window": 0.0, "max_average_window": Attr("long", 2**63 - 1),
           "min_average_window": Attr("long", 10000)},
    infer_shape=_shapes, grad=None)
def average_accumulates(ctx):
    """One step of the window: num_updates and num_accumulates advance by one; sum_1 += param.
    Every 16384th update, sum_2 += sum_1 and sum_1 = 0. When num_accumulates >=
    min_average_window and >= min(max_average_window, int(num_updates * average_window)),
    sum_3 = sum_1 + sum_2, sum_1 = sum_2 = 0, old_num_accumulates = num_accumulates and
    num_accumulates = 0.

    Each move reads the sums as the previous move left them: Paddle's kernel is run in place
    (``out_*`` are the ``in_*`` variables; with other outputs its CPU kernel fails), so this
    step's parameter is part of what moves. The counters are int64 ``[1]`` tensors.
    """
    param = ctx.input("param")
    sum_1, sum_2, sum_3 = ctx.input("in_sum_1"), ctx.input("in_sum_2"), ctx.input("in_sum_3")
    counters = [ctx.input(s) for s in ("in_num_accumulates", "in_old_num_accumulates", "in_num_updates")]
    num_accumulates, old_num_accumulates, num_updates = (c.reshape(()) for c in counters)
    num_updates = num_updates + 1
    num_accumulates = num_accumulates + 1
    out_1, out_2, out_3 = sum_1 + param, sum_2, sum_3
    spill = (num_updates % MAX_NUM_ACCUMULATES) == 0
    out_2 = jnp.where(spill, out_2 + out_1, out_2)
    out_1 = jnp.where(spill, jnp.zeros_like(out_1), out_1)
    # int64(float32(num_updates) * average_window): the kernel multiplies in float and converts back.
    rate = jnp.asarray(np.float32(ctx.attr("average_window")), jnp.float32)
    window = (num_updates.astype(jnp.float32) * rate).astype(num_updates.dtype)
    limit = jnp.minimum(jnp.asarray(int(ctx.attr("max_average_window")), num_updates.dtype), window)
    full = (num_accumulates >= int(ctx.attr("min_average_window"))) & (num_accumulates >= limit)
    out_3 = jnp.where(full, out_1 + out_2, out_3)
    out_1 = jnp.where(full, jnp.zeros_like(out_1), out_1)
    out_2 = jnp.where(full, jnp.zeros_like(out_2), out_2)
    old_num_accumulates = jnp.where(full, num_accumulates, old_num_accumulates)
    num_accumulates = jnp.where(full, jnp.zeros_like(num_accumulates), num_accumulates)
    shaped = [v.reshape(c.shape).astype(c.dtype) for v, c in
              zip((num_accumulates, old_num_accumulates, num_updates), counters)]
    return {"out_sum_1": out_1, "out_sum_2": out_2, "out_sum_3": out_3, "out_num_accumulates": shaped[0],
            "out_old_num_accumulates": shaped[1], "out_num_updates": shaped[2]}
