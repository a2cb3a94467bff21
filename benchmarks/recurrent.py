"""Recurrent nets: a training step of a 2-layer LSTM (hidden 256, sequence 100, batch 32) built two
ways, and a while loop of 1,000 tiny iterations.

The model: x [T=100, B=32, 256] -> 2-layer LSTM -> mean over time -> fc 10 -> squared error
against y, plain SGD. The same initial parameters and data on every side:

- (a) fluidjax, the fused ``rnn`` op (``layer.lstm``, what ``paddle.nn.LSTM`` saves);
- (b) fluidjax, a ``StaticRNN`` whose step block holds the two LSTM cells written with fc,
  split, sigmoid, tanh (Paddle's ``recurrent`` op; one ``lax.scan`` here);
- hand-written JAX: the same math as one ``lax.scan`` per layer with the input projection
  hoisted out of the loop, ``jax.value_and_grad`` and SGD jitted with donation;
- Paddle 2.6.2's static Executor running the same two forward programs (parsed from fluidjax's
  bytes) with Paddle's own backward and SGD. (Paddle 2.6's backward of ``recurrent`` drops the
  gradient path through the memories, see docs/recurrent.md: its StaticRNN step computes less
  than the others; it is timed as it is.)

The first losses of every side are checked to agree before anything is timed.

While loop: ``layer.while_loop`` of 1,000 iterations of ``i += 1; x = x * 0.999 + 0.001`` on a
[4] vector, fluidjax's compiled run vs Paddle's Executor running the same program; reported
as microseconds per iteration.

Targets (issue 9): fused rnn <= 1.1x JAX, StaticRNN <= 1.25x JAX, Paddle/fluidjax >= 3 for both.

    python benchmarks/recurrent.py [--steps N] [--skip-while]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from timing import interleaved_medians  # noqa: E402

T, B, IN, H, LAYERS, CLASSES, LR = 100, 32, 256, 256, 2, 10, 0.01


def initial_params(seed: int = 0) -> dict[str, np.ndarray]:
    """Per layer W_ih [4H, in], W_hh [4H, H], b_ih, b_hh [4H] (gates i, f, c, o), then fc."""
    rng = np.random.default_rng(seed)
    bound = 1.0 / np.sqrt(H)
    params = {}
    for layer in range(LAYERS):
        width = IN if layer == 0 else H
        for name, shape in (("w_ih", (4 * H, width)), ("w_hh", (4 * H, H)), ("b_ih", (4 * H,)), ("b_hh", (4 * H,))):
            params[f"l{layer}.{name}"] = rng.uniform(-bound, bound, shape).astype(np.float32)
    params["fc.w"] = rng.uniform(-0.1, 0.1, (H, CLASSES)).astype(np.float32)
    params["fc.b"] = np.zeros((CLASSES,), np.float32)
    return params


def batches(count: int, seed: int = 1):
    rng = np.random.default_rng(seed)
    return [(rng.uniform(-1, 1, (T, B, IN)).astype(np.float32), rng.uniform(-1, 1, (B, CLASSES)).astype(np.float32))
            for _ in range(count)]


# -- fluidjax: the fused rnn op --------------------------------------------------------------------
def fused_program():
    import fluidjax as fj
    from fluidjax import layer

    main, startup = fj.Program(), fj.Program()
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        x = main.global_block().create_var("x", (T, -1, IN), "float32")
        y = main.global_block().create_var("y", (-1, CLASSES), "float32")
        out, _, _ = layer.lstm(x, None, None, T, H, num_layers=LAYERS)
        logits = layer.fc(layer.reduce_mean(out, dim=0), CLASSES)
        loss = layer.mean(layer.square(logits - y))
    rnn = next(op for op in main.global_block().ops if op.type == "rnn")
    weights = rnn.input("WeightList")
    fc_w, fc_b = [p.name for p in main.all_parameters() if p.name.startswith("fc")]
    names = {}
    for layer_idx in range(LAYERS):
        names[f"l{layer_idx}.w_ih"], names[f"l{layer_idx}.w_hh"] = weights[2 * layer_idx], weights[2 * layer_idx + 1]
        names[f"l{layer_idx}.b_ih"] = weights[2 * LAYERS + 2 * layer_idx]
        names[f"l{layer_idx}.b_hh"] = weights[2 * LAYERS + 2 * layer_idx + 1]
    names["fc.w"], names["fc.b"] = fc_w, fc_b
    return main, startup, loss, lambda p: {names[k]: v for k, v in p.items()}


# -- fluidjax: StaticRNN ----------------------------------------------------------------------------
def static_rnn_program():
    import fluidjax as fj
    from fluidjax import layer

    main, startup = fj.Program(), fj.Program()
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        x = main.global_block().create_var("x", (T, -1, IN), "float32")
        y = main.global_block().create_var("y", (-1, CLASSES), "float32")
        rnn = layer.StaticRNN()
        with rnn.step():
            inp = rnn.step_input(x)
            states = [(rnn.memory(shape=[-1, H], batch_ref=inp), rnn.memory(shape=[-1, H], batch_ref=inp))
                      for _ in range(LAYERS)]
            for h_prev, c_prev in states:
                gates = layer.fc([inp, h_prev], 4 * H)
                i, f, g, o = layer.split(gates, 4, dim=1)
                c = layer.sigmoid(f) * c_prev + layer.sigmoid(i) * layer.tanh(g)
                h = layer.sigmoid(o) * layer.tanh(c)
                rnn.update_memory(h_prev, h)
                rnn.update_memory(c_prev, c)
                inp = h
            rnn.step_output(h)
        out = rnn()
        logits = layer.fc(layer.reduce_mean(out, dim=0), CLASSES)
        loss = layer.mean(layer.square(logits - y))
    fc_names = [p.name for p in main.all_parameters()]      # per layer: w_x, w_h, b; then the head

    def mapping(p):
        values = {}
        for layer_idx in range(LAYERS):
            w_x, w_h, b = fc_names[3 * layer_idx:3 * layer_idx + 3]
            values[w_x] = np.ascontiguousarray(p[f"l{layer_idx}.w_ih"].T)
            values[w_h] = np.ascontiguousarray(p[f"l{layer_idx}.w_hh"].T)
            values[b] = p[f"l{layer_idx}.b_ih"] + p[f"l{layer_idx}.b_hh"]
        values[fc_names[-2]], values[fc_names[-1]] = p["fc.w"], p["fc.b"]
        return values

    return main, startup, loss, mapping


def fluidjax_trainer(build, params):
    import fluidjax as fj

    main, startup, loss, mapping = build()
    forward = main.serialize()
    with fj.program_guard(main, startup):
        fj.optimizer.SGD(learning_rate=LR).minimize(loss)
    exe, scope = fj.Executor(), fj.Scope()
    exe.run(startup, scope=scope)
    values = mapping(params)
    for name, value in values.items():
        scope.var(name).get_tensor().set(value)

    def step(x, y):
        return exe.run(main, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope)[0]

    return step, forward, loss.name, values


# -- hand-written JAX -------------------------------------------------------------------------------
def jax_trainer(params):
    import jax
    import jax.numpy as jnp
    from jax import lax

    def lstm_layer(p, layer, inp):
        xp = inp @ p[f"l{layer}.w_ih"].T + p[f"l{layer}.b_ih"] + p[f"l{layer}.b_hh"]     # hoisted

        def cell(state, xp_t):
            h, c = state
            i, f, g, o = jnp.split(xp_t + h @ p[f"l{layer}.w_hh"].T, 4, axis=-1)
            c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
            h = jax.nn.sigmoid(o) * jnp.tanh(c)
            return (h, c), h

        zeros = jnp.zeros((inp.shape[1], H), inp.dtype)
        return lax.scan(cell, (zeros, zeros), xp)[1]

    def loss_fn(p, x, y):
        h = x
        for layer in range(LAYERS):
            h = lstm_layer(p, layer, h)
        logits = jnp.mean(h, axis=0) @ p["fc.w"] + p["fc.b"]
        return jnp.mean((logits - y) ** 2)

    def step_fn(p, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(p, x, y)
        return jax.tree.map(lambda a, g: a - LR * g, p, grads), loss

    step_fn = jax.jit(step_fn, donate_argnums=(0,))
    state = {k: jnp.asarray(v) for k, v in params.items()}

    def step(x, y):
        nonlocal state
        state, loss = step_fn(state, x, y)
        return np.asarray(loss)

    return step


# -- Paddle -------------------------------------------------------------------------------------------
def paddle_trainer(forward: bytes, loss_name: str, values: dict):
    os.environ.setdefault("GLOG_minloglevel", "2")
    import paddle

    paddle.enable_static()
    main = paddle.static.Program.parse_from_string(forward)
    startup = paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        paddle.optimizer.SGD(learning_rate=LR).minimize(main.global_block().var(loss_name))
    scope, place = paddle.static.Scope(), paddle.CPUPlace()
    exe = paddle.static.Executor(place)
    with paddle.static.scope_guard(scope):
        exe.run(startup)
        for name, value in values.items():
            scope.var(name).get_tensor().set(value, place)

    def step(x, y):
        with paddle.static.scope_guard(scope):
            return exe.run(main, feed={"x": x, "y": y}, fetch_list=[loss_name])[0]

    return step


# -- while loop ---------------------------------------------------------------------------------------
ITERATIONS = 1000


def while_program():
    import fluidjax as fj
    from fluidjax import layer

    main, startup = fj.Program(), fj.Program()
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        x = main.global_block().create_var("x", (4,), "float32")
        i = layer.fill_constant([1], "int64", 0)
        n = layer.fill_constant([1], "int64", ITERATIONS)
        start = layer.assign(x)
        _, out = layer.while_loop(lambda i, v: layer.less_than(i, n),
                                  lambda i, v: [layer.increment(i, in_place=False), v * 0.999 + 0.001], [i, start])
    return main, out


def time_while(steps: int) -> dict:
    import fluidjax as fj

    main, out = while_program()
    feed = {"x": np.zeros(4, np.float32)}
    exe, scope = fj.Executor(), fj.Scope()
    ours = exe.run(main, feed=feed, fetch_list=[out], scope=scope)[0]
    os.environ.setdefault("GLOG_minloglevel", "2")
    import paddle

    paddle.enable_static()
    prog = paddle.static.Program.parse_from_string(main.serialize())
    pexe, pscope = paddle.static.Executor(paddle.CPUPlace()), paddle.static.Scope()

    def paddle_run():
        with paddle.static.scope_guard(pscope):
            return pexe.run(prog, feed=feed, fetch_list=[out.name])[0]

    theirs = paddle_run()
    np.testing.assert_allclose(ours, theirs, rtol=1e-5)
    np.testing.assert_allclose(ours, 1 - 0.999 ** ITERATIONS, rtol=1e-3)     # from x = 0
    ms = interleaved_medians({"fluidjax": lambda: exe.run(main, feed=feed, fetch_list=[out], scope=scope),
                              "paddle": paddle_run}, [()], steps, warmup=3)
    return {k: v * 1e3 / ITERATIONS for k, v in ms.items()}       # microseconds per iteration


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--skip-while", action="store_true")
    args = parser.parse_args(argv)
    import jax

    print(f"JAX {jax.__version__} on {jax.devices()[0].platform}; LSTM {LAYERS} layers, hidden {H}, "
          f"sequence {T}, batch {B}; SGD step, median of {args.steps}")
    params = initial_params()
    data = batches(4)
    jax_step = jax_trainer(params)
    results = {}
    for label, build in (("fused rnn op", fused_program), ("StaticRNN", static_rnn_program)):
        ours, forward, loss_name, values = fluidjax_trainer(build, params)
        theirs = paddle_trainer(forward, loss_name, values)
        reference = jax_trainer(params)
        first = [float(f(*data[0])) for f in (ours, reference, theirs)]
        np.testing.assert_allclose(first[0], first[1], rtol=1e-4, err_msg=f"{label}: fluidjax vs JAX loss")
        np.testing.assert_allclose(first[0], first[2], rtol=1e-4, err_msg=f"{label}: fluidjax vs Paddle loss")
        jax_pass = interleaved_medians({"fluidjax": ours, "jax": jax_step}, data, args.steps, args.warmup)
        paddle_pass = interleaved_medians({"fluidjax": ours, "paddle": theirs}, data, max(3, args.steps // 4), 1)
        results[label] = (jax_pass["fluidjax"], jax_pass["jax"], paddle_pass["paddle"],
                          jax_pass["fluidjax"] / jax_pass["jax"], paddle_pass["paddle"] / paddle_pass["fluidjax"])
    print(f"{'':14} {'fluidjax ms':>12} {'JAX ms':>9} {'Paddle ms':>10} {'fluidjax/JAX':>13} {'Paddle/fluidjax':>16}")
    for label, (f, j, p, fj_ratio, p_ratio) in results.items():
        print(f"{label:14} {f:>12.2f} {j:>9.2f} {p:>10.2f} {fj_ratio:>13.2f} {p_ratio:>16.2f}")
    if not args.skip_while:
        t0 = time.perf_counter()
        per = time_while(max(3, args.steps // 2))
        print(f"while_loop of {ITERATIONS} iterations: fluidjax {per['fluidjax']:.3f} us/iteration, Paddle "
              f"{per['paddle']:.3f} us/iteration (Paddle/fluidjax {per['paddle'] / per['fluidjax']:.1f}); "
              f"{time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
