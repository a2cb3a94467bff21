"""The other sides of the training benchmarks: hand-written JAX (``jax.value_and_grad`` plus
Paddle's Adam) and Paddle's static Executor."""

from __future__ import annotations

import os
from typing import Callable, Sequence

import numpy as np

LR, BETA1, BETA2, EPS = 1e-3, 0.9, 0.999, 1e-8


def adam_trainer(loss_fn: Callable, params: dict) -> Callable:
    """A step function ``step(x, y) -> loss`` (NumPy) training ``params`` with ``loss_fn(p, x, y)``.

    The update is Paddle's Adam (epsilon scaled by sqrt(1 - beta2^t), as Paddle's kernel has it),
    jitted with the whole state donated, as a careful JAX user would write it.
    """
    import jax
    import jax.numpy as jnp

    state = {
        "params": {k: jnp.asarray(v) for k, v in params.items()},
        "m1": {k: jnp.zeros(v.shape, jnp.float32) for k, v in params.items()},
        "m2": {k: jnp.zeros(v.shape, jnp.float32) for k, v in params.items()},
        "pows": jnp.asarray([BETA1, BETA2], jnp.float32),
    }

    def step_fn(state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(state["params"], x, y)
        b1p, b2p = state["pows"][0], state["pows"][1]
        lr_t = LR * jnp.sqrt(1 - b2p) / (1 - b1p)
        m1 = jax.tree.map(lambda m, g: BETA1 * m + (1 - BETA1) * g, state["m1"], grads)
        m2 = jax.tree.map(lambda m, g: BETA2 * m + (1 - BETA2) * g * g, state["m2"], grads)
        new_params = jax.tree.map(lambda p, a, b: p - lr_t * (a / (jnp.sqrt(b) + EPS * jnp.sqrt(1 - b2p))),
                                  state["params"], m1, m2)
        pows = state["pows"] * jnp.asarray([BETA1, BETA2], jnp.float32)
        return {"params": new_params, "m1": m1, "m2": m2, "pows": pows}, loss

    step_fn = jax.jit(step_fn, donate_argnums=(0,))

    def step(x, y):
        nonlocal state
        state, loss = step_fn(state, x, y)
        return np.asarray(loss)

    return step


def paddle_trainer(main, startup, params: dict, feed_names: Sequence[str], cost) -> Callable:
    """A step function ``step(*feeds) -> loss`` running Paddle's program ``main`` after ``startup``,
    with ``params`` written over the startup program's values."""
    os.environ.setdefault("GLOG_minloglevel", "2")
    import paddle

    scope, place = paddle.static.Scope(), paddle.CPUPlace()
    exe = paddle.static.Executor(place)
    with paddle.static.scope_guard(scope):
        exe.run(startup)
        for name, value in params.items():
            scope.find_var(name).get_tensor().set(value, place)

    def step(*feeds):
        with paddle.static.scope_guard(scope):
            return exe.run(main, feed=dict(zip(feed_names, feeds)), fetch_list=[cost])[0]

    return step
