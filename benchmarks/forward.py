"""Forward pass of the seeds' model: fluidjax's Executor vs hand-written JAX vs Paddle's Executor.

Same weights, same inputs, one run. Each side takes NumPy feeds and returns a NumPy cost, as a
user's loop does. Prints median milliseconds and the ratios (target at batch 64:
fluidjax / hand-written JAX <= 1.10).

    python benchmarks/forward.py [--repeats N]
"""

from __future__ import annotations

import argparse
import os
import jax
import jax.numpy as jnp
import numpy as np

import fluidjax as fj
from fluidjax import layer
from timing import HEADER, compare, row


def build():
    main, startup = fj.Program(), fj.Program()
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        x = layer.data("images", input_size=64 * 64)
        y = layer.fc(x, output_size=100, activation="softmax")
        l = layer.data("label", dims=10)
        cost = layer.cross_entropy(y, l)
    return main, startup, cost


@jax.jit
def hand_written(w, b, images, label):
    probs = jax.nn.softmax(images @ w + b, axis=-1)
    padded = jnp.pad(label, ((0, 0), (0, probs.shape[1] - label.shape[1])))
    return -jnp.sum(padded * jnp.log(probs), axis=-1, keepdims=True)


def paddle_runner(program_bytes: bytes, params: dict, feed: dict, fetch: str):
    os.environ.setdefault("GLOG_minloglevel", "2")
    import paddle

    paddle.enable_static()
    program = paddle.static.Program.parse_from_string(program_bytes)
    scope = paddle.static.Scope()
    exe = paddle.static.Executor(paddle.CPUPlace())
    with paddle.static.scope_guard(scope):
        for name, value in params.items():
            scope.var(name).get_tensor().set(value, paddle.CPUPlace())

    def run():
        with paddle.static.scope_guard(scope):
            return exe.run(program, feed=feed, fetch_list=[fetch])[0]

    return run


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=1000)
    args = parser.parse_args()
    main_program, startup, cost = build()
    exe = fj.Executor()
    scope = fj.Scope()
    exe.run(startup, scope=scope)
    params = {n: np.asarray(scope.find_var(n).get_tensor()) for n in ("fc_0.w_0", "fc_0.b_0")}
    program_bytes = main_program.serialize()
    print(f"device: {jax.devices()[0]}; seed model forward (fc 4096->100 softmax, cross entropy)")
    print(HEADER)
    for batch in (64, 1024):
        rng = np.random.default_rng(batch)
        images = rng.random((batch, 4096), dtype=np.float32)
        label = rng.dirichlet(np.ones(10), batch).astype(np.float32)
        feed = {"images": images, "label": label}
        w, b = jnp.asarray(params["fc_0.w_0"]), jnp.asarray(params["fc_0.b_0"])

        def ours():
            return exe.run(main_program, feed=feed, fetch_list=[cost], scope=scope)[0]

        def theirs_jax():
            return np.asarray(hand_written(w, b, images, label))

        paddle_run = paddle_runner(program_bytes, params, feed, cost.name)
        np.testing.assert_allclose(ours(), theirs_jax(), rtol=1e-4)
        np.testing.assert_allclose(ours(), paddle_run(), rtol=1e-4)
        ms = compare({"fluidjax": ours, "jax": theirs_jax, "paddle": paddle_run}, [()],
                                 args.repeats, warmup=20)
        print(row(batch, ms))


if __name__ == "__main__":
    main()
