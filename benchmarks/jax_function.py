"""``jax.jit`` of ``fj.to_jax``'s function in a training step vs the same step written by hand in JAX.

Both sides run the same optax update on the same parameters and batches, jitted the same way
(state donated), in one process; the only difference is who wrote the forward: the program
lowered by fluidjax (``fn(variables, x, y)``) or a hand-written JAX function.

- MLP 784-200-10 (relu, softmax, cross entropy), batch 64, ``jax.grad`` + ``optax.adam``.
- fluidjax's side is converted with ``checks=False`` (the hand-written side checks nothing); the
  MLP is measured with the default ``checks=True`` as well.
- ResNet-18 (``models.py``: 3x224x224, batch norm in training mode, its statistics carried as
  state), batch 8 on CPU, ``optax.sgd`` with momentum.

Per model: the median ms per step of each side (interleaved call by call), the ratio
fluidjax/JAX, and the spread of the ratio over ``--repeats`` repeats (min..max).

    python benchmarks/jax_function.py [--steps N] [--repeats R] [--skip-resnet] [--resnet-batch B]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax  # noqa: E402  (before fluidjax/paddle)
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402

import fluidjax as fj  # noqa: E402
from fluidjax import layer  # noqa: E402
from timing import interleaved_medians  # noqa: E402

import models  # noqa: E402


def _block(tree):
    return jax.block_until_ready(tree)


def mlp_sides(batch: int = 64, count: int = 8, checks: bool = False):
    """(fluidjax step, JAX step, their initial carries, batches): MLP 784-200-10 with Adam."""
    main, startup = fj.Program(), fj.Program()
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        x = layer.data("x", input_size=784)
        y = layer.data("y", dims=1, dtype="int64")
        prob = layer.fc(layer.fc(x, output_size=200, activation="relu"), output_size=10, activation="softmax")
        loss = layer.mean(layer.cross_entropy(prob, y))
    scope = fj.Scope()
    fj.Executor().run(startup, scope=scope)
    fn, variables = fj.to_jax(main, feed=[x, y], fetch_list=[loss], scope=scope, checks=checks)
    opt = optax.adam(1e-3)

    def fj_loss(params, xs, ys):
        return jnp.reshape(fn({"params": params, "state": {}}, xs, ys)[0][0], ())

    def jax_loss(params, xs, ys):
        h = jax.nn.relu(xs @ params["fc_0.w_0"] + params["fc_0.b_0"])
        p = jax.nn.softmax(h @ params["fc_1.w_0"] + params["fc_1.b_0"])
        return -jnp.mean(jnp.log(jnp.take_along_axis(p, ys, axis=1)))

    def make(loss_fn):
        def step(carry, xs, ys):
            params, opt_state = carry
            value, grads = jax.value_and_grad(loss_fn)(params, xs, ys)
            updates, opt_state = opt.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state), value
        return jax.jit(step, donate_argnums=(0,))

    params = variables["params"]
    rng = np.random.default_rng(0)
    batches = [(jnp.asarray(rng.standard_normal((batch, 784), dtype=np.float32)),
                jnp.asarray(rng.integers(0, 10, (batch, 1)).astype(np.int64))) for _ in range(count)]
    carries = {name: (jax.tree_util.tree_map(jnp.copy, params), opt.init(params)) for name in ("fluidjax", "jax")}
    return {"fluidjax": make(fj_loss), "jax": make(jax_loss)}, carries, batches


def resnet_sides(batch: int = 8, count: int = 2, checks: bool = False):
    """ResNet-18 with batch norm in training mode and momentum SGD, both sides from the same values."""
    main, startup, feeds, loss, names = _resnet_program()
    scope = fj.Scope()
    fj.Executor().run(startup, scope=scope)
    fn, variables = fj.to_jax(main, feed=feeds, fetch_list=[loss], scope=scope, checks=checks)
    values = [np.asarray(variables["params"].get(n, variables["state"].get(n))) for n in names]
    trainable = [t for _, _, t in models.specs("resnet18")]
    opt = optax.sgd(models.LR, momentum=models.MOMENTUM)

    def fj_step(carry, img, label):
        params, state, opt_state = carry

        def loss_fn(p):
            (value,), new_state = fn({"params": p, "state": state}, img, label)
            return jnp.reshape(value, ()), new_state
        (value, new_state), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        updates, opt_state = opt.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), {**state, **new_state}, opt_state), value

    def jax_step(carry, img, label):
        params, stats, opt_state = carry

        def loss_fn(p):
            merged, ps, ss = [], iter(p), iter(stats)
            for t in trainable:
                merged.append(next(ps) if t else next(ss))
            ops = models.JaxOps(merged, train=True)
            logits = models.resnet18(ops, img)
            return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), label, axis=1)), ops.new_stats
        (value, new_stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        updates, opt_state = opt.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), new_stats, opt_state), value

    jparams = [jnp.asarray(v) for v, t in zip(values, trainable) if t]
    jstats = [jnp.asarray(v) for v, t in zip(values, trainable) if not t]
    rng = np.random.default_rng(0)
    batches = [(jnp.asarray(rng.standard_normal((batch,) + models.IMAGE, dtype=np.float32)),
                jnp.asarray(rng.integers(0, models.CLASSES, (batch, 1)).astype(np.int64))) for _ in range(count)]
    carries = {"fluidjax": (variables["params"], variables["state"], opt.init(variables["params"])),
               "jax": (jparams, jstats, opt.init(jparams))}
    return ({"fluidjax": jax.jit(fj_step, donate_argnums=(0,)), "jax": jax.jit(jax_step, donate_argnums=(0,))},
            carries, batches)


def _resnet_program():
    """ResNet-18's forward and loss (no optimizer: optax owns the update)."""
    main, startup = fj.Program(), fj.Program()
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        img = layer.data("img", shape=list(models.IMAGE))
        label = layer.data("label", dims=1, dtype="int64")
        logits = models.resnet18(models.FluidjaxOps(fj, layer), img)
        loss = layer.mean(layer.softmax_with_cross_entropy(logits, label))
    names = models.fluidjax_param_names(main, "resnet18")
    return main, startup, ["img", "label"], loss, names


def measure(sides, carries, batches, steps: int, repeats: int, warmup: int) -> dict:
    state = dict(carries)

    def runner(name):
        def run(xs, ys):
            state[name], value = sides[name](state[name], xs, ys)
            _block(value)
        return run

    runners = {name: runner(name) for name in sides}
    ratios, medians = [], []
    for _ in range(repeats):
        ms = interleaved_medians(runners, batches, steps, warmup)
        medians.append(ms)
        ratios.append(ms["fluidjax"] / ms["jax"])
        warmup = 2
    return {"fluidjax": statistics.median(m["fluidjax"] for m in medians),
            "jax": statistics.median(m["jax"] for m in medians),
            "ratio": statistics.median(ratios), "low": min(ratios), "high": max(ratios)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--skip-resnet", action="store_true")
    parser.add_argument("--resnet-batch", type=int, default=8)
    parser.add_argument("--resnet-steps", type=int, default=10)
    args = parser.parse_args()
    print(f"device: {jax.devices()[0].device_kind}; median ms per step; ratio fluidjax/JAX (min..max of "
          f"{args.repeats} repeats)")
    print(f"{'model':<22} {'fluidjax ms':>12} {'JAX ms':>9} {'ratio':>7} {'spread':>13}")
    # checks=False: as the hand-written side, which checks nothing; the MLP also with the default
    # checks (the labels' range check is a host callback in the step)
    rows = [("MLP 784-200-10 b64", mlp_sides(), args.steps, 10),
            ("MLP b64 checks=True", mlp_sides(checks=True), args.steps, 10)]
    if not args.skip_resnet:
        rows.append((f"ResNet-18 b{args.resnet_batch}", resnet_sides(args.resnet_batch), args.resnet_steps, 2))
    for name, (sides, carries, batches), steps, warmup in rows:
        r = measure(sides, carries, batches, steps, args.repeats, warmup)
        print(f"{name:<22} {r['fluidjax']:>12.3f} {r['jax']:>9.3f} {r['ratio']:>7.3f} "
              f"{r['low']:>6.3f}..{r['high']:<6.3f}", flush=True)


if __name__ == "__main__":
    main()
