"""Gradients of activations from their output, for the ``<type>_grad`` ops Paddle writes.

Paddle's backward of several activations reads ``Out`` instead of ``X`` (``tanh_grad`` takes
``Out`` and ``Out@GRAD``): a program Paddle built carries no ``X`` in those grad ops. fluidjax's
own grad ops carry the forward inputs and use ``jax.vjp`` of the forward rule; for a grad op
without them, these rules compute ``X@GRAD`` from ``Out`` exactly as Paddle's kernels do.
"""

from __future__ import annotations

from typing import Callable

import jax.numpy as jnp


def _axis_sum(value, attr):
    return jnp.sum(value, axis=int(attr("axis", -1)), keepdims=True)


# op type -> fn(out, out_grad, attr) -> x_grad; ``attr(name, default)`` reads the grad op's attrs.
OUT_GRADS: dict[str, Callable] = {
    "tanh": lambda out, g, attr: g * (1 - out * out),
    "sigmoid": lambda out, g, attr: g * out * (1 - out),
    "relu": lambda out, g, attr: jnp.where(out > 0, g, jnp.zeros((), g.dtype)),
    "relu6": lambda out, g, attr: jnp.where((out > 0) & (out < attr("threshold", 6.0)), g, jnp.zeros((), g.dtype)),
    "exp": lambda out, g, attr: g * out,
    "expm1": lambda out, g, attr: g * (out + 1),
    "sqrt": lambda out, g, attr: g * 0.5 / out,
    "rsqrt": lambda out, g, attr: -0.5 * g * out * out * out,
    "reciprocal": lambda out, g, attr: -g * out * out,
    "hard_sigmoid": lambda out, g, attr: jnp.where((out > 0) & (out < 1), g * attr("slope", 0.2), jnp.zeros((), g.dtype)),
    "selu": lambda out, g, attr: jnp.where(out > 0, g * attr("scale", 1.0507009873554805),
                                           g * (out + attr("scale", 1.0507009873554805) * attr("alpha", 1.6732632423543772))),
    "softmax": lambda out, g, attr: out * (g - _axis_sum(g * out, attr)),
    "log_softmax": lambda out, g, attr: g - jnp.exp(out) * _axis_sum(g, attr),
}
