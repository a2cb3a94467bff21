"""Per-call cost of ``Executor.run`` where the computation is nearly free: what fluidjax adds to a call.

1. One fc layer (8 -> 8, batch 1, no activation), fetching the output as NumPy:
   - fluidjax: ``exe.run(main, feed={"x": x}, fetch_list=[y])``;
   - hand-written JAX: ``np.asarray(jax.jit(lambda x, w, b: x @ w + b)(x, w, b))`` with NumPy ``x``
     and the weights already on the device;
   - Paddle 2.6.2's static Executor running the same program (parsed from fluidjax's serialized
     ``ProgramDesc``) with the same weights.
   Target: fluidjax / jax.jit <= 1.3.
2. The MLP Adam training step of ``train_step.py`` (784-200-10, batch 64; forward, backward,
   update, fetch the loss), reusing its ``fluidjax_trainer`` / ``jax_trainer`` / ``paddle_trainer``.
   Target: fluidjax / JAX <= 1.05.

Medians of interleaved calls (the sides take turns call by call; each ratio comes from its own
interleaved pair, see ``timing.compare``), in microseconds per call.

    python benchmarks/overhead.py [--calls 3000] [--steps 1000] [--skip-paddle]
"""

from __future__ import annotations

import argparse
import os

import jax  # before paddle: the other import order crashes the process
import jax.numpy as jnp
import numpy as np

import fluidjax as fj
from fluidjax import layer
from timing import compare, interleaved_medians

WIDTH = 8


def build_fc():
    main, startup = fj.Program(), fj.Program()
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        x = layer.data("x", input_size=WIDTH)
        y = layer.fc(x, output_size=WIDTH)
    return main, startup, y


def paddle_fc_runner(program_bytes: bytes, params: dict, x: np.ndarray, fetch: str):
    """Paddle's static Executor running fluidjax's serialized program with ``params``."""
    os.environ.setdefault("GLOG_minloglevel", "2")
    import paddle

    paddle.enable_static()
    program = paddle.static.Program.parse_from_string(program_bytes)
    scope, place = paddle.static.Scope(), paddle.CPUPlace()
    exe = paddle.static.Executor(place)
    with paddle.static.scope_guard(scope):
        for name, value in params.items():
            scope.var(name).get_tensor().set(value, place)

    def run():
        with paddle.static.scope_guard(scope):
            return exe.run(program, feed={"x": x}, fetch_list=[fetch])[0]

    return run


def fc_overhead(calls: int, skip_paddle: bool) -> dict:
    main, startup, y = build_fc()
    exe, scope = fj.Executor(), fj.Scope()
    exe.run(startup, scope=scope)
    params = {n: np.asarray(scope.find_var(n).get_tensor()) for n in ("fc_0.w_0", "fc_0.b_0")}
    x = np.random.default_rng(0).standard_normal((1, WIDTH)).astype(np.float32)

    def ours():
        return exe.run(main, feed={"x": x}, fetch_list=[y], scope=scope)[0]

    f = jax.jit(lambda x, w, b: x @ w + b)
    w, b = jnp.asarray(params["fc_0.w_0"]), jnp.asarray(params["fc_0.b_0"])

    def theirs_jax():
        return np.asarray(f(x, w, b))

    runners = {"fluidjax": ours, "jax": theirs_jax}
    np.testing.assert_allclose(ours(), theirs_jax(), rtol=1e-5, atol=1e-6)
    if skip_paddle:
        return interleaved_medians(runners, [()], calls, warmup=200)
    runners["paddle"] = paddle_fc_runner(main.serialize(), params, x, y.name)
    np.testing.assert_allclose(ours(), runners["paddle"](), rtol=1e-5, atol=1e-6)
    return compare(runners, [()], calls, warmup=200)


def mlp_overhead(steps: int, skip_paddle: bool) -> dict:
    import train_step as ts

    params = ts.initial_params(ts.SIZES)
    data = ts.batches(64, 8)
    runners = {"fluidjax": ts.fluidjax_trainer(ts.SIZES, params), "jax": ts.jax_trainer(ts.SIZES, params)}
    if not skip_paddle:
        runners["paddle"] = ts.paddle_trainer(ts.SIZES, params)
    first = {k: [float(r(x, y)) for x, y in data[:3]] for k, r in runners.items()}
    for k in first:
        np.testing.assert_allclose(first["fluidjax"], first[k], rtol=1e-4)
    if skip_paddle:
        return interleaved_medians(runners, data, steps, warmup=20)
    return compare(runners, data, steps, warmup=20)


def print_row(label: str, ms: dict) -> None:
    us = {k: v * 1e3 for k, v in ms.items() if k in ("fluidjax", "jax", "paddle")}
    ratio_jax = ms.get("fluidjax/jax", ms["fluidjax"] / ms["jax"])
    paddle = f"{us['paddle']:>11.1f}" if "paddle" in us else f"{'-':>11}"
    paddle_ratio = f"{ms['paddle/fluidjax']:>16.2f}" if "paddle/fluidjax" in ms else f"{'-':>16}"
    print(f"{label:<24} {us['fluidjax']:>12.1f} {us['jax']:>8.1f} {paddle} {ratio_jax:>13.2f} {paddle_ratio}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=3000, help="timed calls per side, one-fc program")
    parser.add_argument("--steps", type=int, default=1000, help="timed steps per side, MLP training step")
    parser.add_argument("--skip-paddle", action="store_true")
    parser.add_argument("--skip-mlp", action="store_true")
    args = parser.parse_args()

    print(f"device: {jax.devices()[0]} ({os.cpu_count()} CPUs); per-call cost, median microseconds of "
          f"interleaved calls; NumPy in, NumPy out on every side")
    print(f"{'':<24} {'fluidjax us':>12} {'JAX us':>8} {'Paddle us':>11} {'fluidjax/JAX':>13} {'Paddle/fluidjax':>16}")
    print_row(f"fc {WIDTH}->{WIDTH}, batch 1", fc_overhead(args.calls, args.skip_paddle))
    if not args.skip_mlp:
        print_row("MLP Adam step, batch 64", mlp_overhead(args.steps, args.skip_paddle))
    print(f"calls: {args.calls} (fc), {args.steps} (MLP) per side and pass; "
          "targets: fluidjax/JAX <= 1.3 (fc), <= 1.05 (MLP step)")


if __name__ == "__main__":
    main()
