"""Forward pass of the seeds' model: fluidjax's Executor vs hand-written JAX vs Paddle's Executor.

Same weights, same inputs, one run. Each side takes NumPy feeds and returns a NumPy cost, as a
user's loop does. Prints median milliseconds and the ratios (target at batch 64:
fluidjax / hand-written JAX <= 1.10).

    python benchmarks/forward.py [--repeats N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

import fluidjax as fj
from fluidjax import layer


def median_ms(fn, repeats: int, warmup: int = 20) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


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
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    main_program, startup, cost = build()
    exe = fj.Executor()
    scope = fj.Scope()
    exe.run(startup, scope=scope)
    params = {n: np.asarray(scope.find_var(n).get_tensor()) for n in ("fc_0.w_0", "fc_0.b_0")}
    program_bytes = main_program.serialize()
    print(f"device: {jax.devices()[0]}; seed model forward (fc 4096->100 softmax, cross entropy)")
    print(f"{'batch':>6} {'fluidjax ms':>12} {'JAX ms':>9} {'Paddle ms':>10} {'fluidjax/JAX':>13} {'Paddle/fluidjax':>16}")
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
        t_ours = median_ms(ours, args.repeats)
        t_jax = median_ms(theirs_jax, args.repeats)
        t_paddle = median_ms(paddle_run, args.repeats)
        print(f"{batch:>6} {t_ours:>12.3f} {t_jax:>9.3f} {t_paddle:>10.3f} {t_ours / t_jax:>13.2f} "
              f"{t_paddle / t_ours:>16.2f}")


if __name__ == "__main__":
    main()
