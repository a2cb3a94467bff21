"""One training step (forward, backward, Adam update, fetch the loss) of an MLP: fluidjax's Executor
vs hand-written JAX (``jax.value_and_grad`` + the same Adam update, jitted with donation) vs Paddle
2.6.2's static Executor; then peak memory of 200 training steps of a ~200 MB MLP, fluidjax vs
hand-written JAX, each in a fresh subprocess.

Step time: MLP 784-200-10 (relu, softmax, cross entropy), batch 64 and 512, same initial
parameters and data on all sides; median of many steps after warm-up. Each side takes NumPy
feeds and returns the loss as a NumPy value, as a user's loop does.

Memory: MLP 784-7000-7000-10 float32 (54.5 M parameters, 218 MB; Adam keeps two more copies),
200 Adam steps at batch 8; the peak resident set size of the training steps (Linux's VmHWM,
reset after the first step) and of the whole process (initialisation included).
JAX's CPU client reports no memory statistics.

LeNet: the step of ``train_step_lenet.py`` (batch 64, Adam), in the same run.

The per-run floor (``--ratio``): the batch-64 step only, fluidjax's ``exe.run`` and
``exe.prepare``'d step against hand-written JAX, in ``--repeats`` passes of ``--steps`` interleaved
calls each (the sides take turns call by call, in an order that rotates); it prints each pass's
medians and ratios, then the median ratio over the passes and its spread (min..max); a third
fluidjax side runs every call through the general path (the fast path off: what it was before).
Target:
fluidjax/JAX <= 1.05 (docs/reliability.md, "The per-run floor").

    python benchmarks/train_step.py [--steps N] [--skip-memory] [--skip-lenet]
    python benchmarks/train_step.py --ratio [--repeats 9] [--steps 200] [--no-index-checks]
    python benchmarks/train_step.py --floor       # the Python per call, the step stubbed
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

from sides import BETA1, BETA2, EPS, LR, adam_trainer, paddle_trainer as _paddle_step
from timing import HEADER, compare, row

SIZES = (784, 200, 10)
BIG_SIZES = (784, 7000, 7000, 10)


def initial_params(sizes, seed=0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    params = {}
    for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
        limit = np.sqrt(6.0 / (a + b))
        params[f"fc_{i}.w_0"] = rng.uniform(-limit, limit, (a, b)).astype(np.float32)
        params[f"fc_{i}.b_0"] = np.zeros((b,), np.float32)
    return params


def batches(batch: int, count: int, seed=1):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((batch, SIZES[0])).astype(np.float32),
             rng.integers(0, SIZES[-1], (batch, 1)).astype(np.int64)) for _ in range(count)]


# -- fluidjax ------------------------------------------------------------------------------------
def fluidjax_trainer(sizes, params=None, prepared=False):
    """A step function; ``params`` None keeps the startup program's own (Xavier) initial values.
    ``prepared``: the step calls an ``exe.prepare``'d step instead of ``exe.run``."""
    import fluidjax as fj
    from fluidjax import layer
    from fluidjax.frontend import optimizer

    main, startup = fj.Program(), fj.Program()
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        h = layer.data("x", input_size=sizes[0])
        y = layer.data("y", dims=1, dtype="int64")
        for i, width in enumerate(sizes[1:]):
            last = i == len(sizes) - 2
            attr = fj.ParamAttr(initializer=fj.initializer.Constant(0.0)) if params is not None else None
            h = layer.fc(h, width, activation="softmax" if last else "relu", param_attr=attr)
        cost = layer.mean(layer.cross_entropy(h, y))
        optimizer.Adam(learning_rate=LR, beta1=BETA1, beta2=BETA2, epsilon=EPS).minimize(cost)
    exe, scope = fj.Executor(), fj.Scope()
    exe.run(startup, scope=scope)
    for name, value in (params or {}).items():
        scope.var(name).get_tensor().set(value)

    if prepared:
        run = exe.prepare(main, feed={"x": np.zeros((64, sizes[0]), np.float32), "y": np.zeros((64, 1), np.int64)},
                          fetch_list=[cost], scope=scope)

        def step(x, y):
            return run({"x": x, "y": y})[0]
    else:
        def step(x, y):
            return exe.run(main, feed={"x": x, "y": y}, fetch_list=[cost], scope=scope)[0]

    step.executor = exe
    return step


# -- hand-written JAX ------------------------------------------------------------------------------
def jax_trainer(sizes, params=None):
    """A step function; ``params`` None draws Xavier-uniform initial values on the device."""
    import jax
    import jax.numpy as jnp

    n = len(sizes) - 1
    if params is None:
        keys = jax.random.split(jax.random.PRNGKey(0), n)
        params = {}
        for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
            limit = float(np.sqrt(6.0 / (a + b)))
            params[f"fc_{i}.w_0"] = jax.random.uniform(keys[i], (a, b), jnp.float32, -limit, limit)
            params[f"fc_{i}.b_0"] = jnp.zeros((b,), jnp.float32)

    def loss_fn(p, x, y):
        h = x
        for i in range(n):
            h = h @ p[f"fc_{i}.w_0"] + p[f"fc_{i}.b_0"]
            h = jax.nn.softmax(h) if i == n - 1 else jax.nn.relu(h)
        return -jnp.mean(jnp.log(jnp.take_along_axis(h, y, axis=1)))

    return adam_trainer(loss_fn, params)


# -- Paddle ----------------------------------------------------------------------------------------
def paddle_trainer(sizes, params):
    os.environ.setdefault("GLOG_minloglevel", "2")
    import paddle

    paddle.enable_static()
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
        h = paddle.static.data("x", [-1, sizes[0]], "float32")
        y = paddle.static.data("y", [-1, 1], "int64")
        for i, width in enumerate(sizes[1:]):
            last = i == len(sizes) - 2
            h = paddle.static.nn.fc(h, width, activation="softmax" if last else "relu")
        cost = paddle.mean(paddle.nn.functional.cross_entropy(h, y, use_softmax=False, reduction="none"))
        paddle.optimizer.Adam(learning_rate=LR, beta1=BETA1, beta2=BETA2, epsilon=EPS).minimize(cost)
    return _paddle_step(main, startup, params, ["x", "y"], cost)


def time_steps(steps: int) -> None:
    import jax

    print(f"device: {jax.devices()[0]}; MLP {'-'.join(map(str, SIZES))} (relu, softmax, cross entropy), Adam; "
          f"one step = forward + backward + update + fetch the loss")
    print(HEADER)
    params = initial_params(SIZES)
    for batch in (64, 512):
        data = batches(batch, 8)
        runners = {"fluidjax": fluidjax_trainer(SIZES, params), "jax": jax_trainer(SIZES, params),
                   "paddle": paddle_trainer(SIZES, params)}
        # Same data, same start: the first losses agree.
        first = {k: [float(r(x, y)) for x, y in data[:3]] for k, r in runners.items()}
        np.testing.assert_allclose(first["fluidjax"], first["jax"], rtol=1e-4)
        np.testing.assert_allclose(first["fluidjax"], first["paddle"], rtol=1e-4)
        n = steps if batch <= 64 else max(steps // 2, 20)
        print(row(batch, compare(runners, data, n)))


def floor_ratio(repeats: int, steps: int) -> None:
    """The per-run floor: the batch-64 step of exe.run / exe.prepare vs hand-written JAX, in
    ``repeats`` interleaved passes; each pass's medians, then the median ratio and its spread."""
    import statistics

    import jax

    from timing import interleaved_medians

    params = initial_params(SIZES)
    data = batches(64, 8)
    runners = {"exe.run": fluidjax_trainer(SIZES, params), "prepared": fluidjax_trainer(SIZES, params, prepared=True),
               "general": fluidjax_trainer(SIZES, params), "jax": jax_trainer(SIZES, params)}
    first = {k: [float(r(x, y)) for x, y in data[:3]] for k, r in runners.items()}
    for k in first:
        np.testing.assert_allclose(first[k], first["jax"], rtol=1e-4)
    for plan in runners["general"].executor._plans.values():
        plan.fast = None        # exe.run without the fast path: the general path of every run (the "before")
    print(f"device: {jax.devices()[0]} ({os.cpu_count()} CPUs); MLP {'-'.join(map(str, SIZES))} Adam step, batch 64; "
          f"{repeats} passes of {steps} interleaved calls per side; median microseconds per call")
    print(f"{'pass':>4} {'exe.run':>9} {'prepared':>9} {'general':>9} {'jax':>9} {'run/jax':>8} {'prep/jax':>9} "
          f"{'general/jax':>12}")
    ratios: dict[str, list] = {"exe.run": [], "prepared": [], "general": []}
    for i in range(repeats):
        ms = interleaved_medians(runners, data, steps, warmup=20)
        for k in ratios:
            ratios[k].append(ms[k] / ms["jax"])
        print(f"{i:>4} {ms['exe.run'] * 1e3:>9.1f} {ms['prepared'] * 1e3:>9.1f} {ms['general'] * 1e3:>9.1f} "
              f"{ms['jax'] * 1e3:>9.1f} {ratios['exe.run'][-1]:>8.3f} {ratios['prepared'][-1]:>9.3f} "
              f"{ratios['general'][-1]:>12.3f}")
    fast = {k: r.executor.fast_run_count for k, r in runners.items() if hasattr(r, "executor")}
    for k, values in ratios.items():
        print(f"{k}/jax: median {statistics.median(values):.3f}, spread {min(values):.3f}..{max(values):.3f}")
    print(f"fast-path runs: {fast} (of {repeats * (steps + 20) + 3} calls each)")


def python_floor(calls: int = 300) -> None:
    """The Python ``exe.run`` adds per call, the compiled step replaced by a stub that returns fixed
    outputs: CPU microseconds (this thread's CPU time, so other jobs do not count) of the general
    path, the fast path and an ``exe.prepare``'d step; hot (back to back) and cold (after touching
    16 MiB, as a real step leaves the caches: what a training loop sees)."""
    import statistics

    import jax
    import jax.numpy as jnp

    params = initial_params(SIZES)
    data = batches(64, 2)
    sides = {"general": fluidjax_trainer(SIZES, params), "fast": fluidjax_trainer(SIZES, params),
             "prepared": fluidjax_trainer(SIZES, params, prepared=True)}
    for step in sides.values():
        for x, y in data * 2:
            step(x, y)
        for plan in step.executor._plans.values():
            if plan.feed_names == ("x", "y"):
                outs = (tuple(t._value for t in plan.last_scope[1]), [jnp.ones((1,))])
                plan.step = lambda *args, outs=outs: outs
                if step is sides["general"]:
                    plan.fast = None
    big = np.ones(4 << 20, np.float32)
    x, y = data[0]
    clock = time.thread_time_ns
    print(f"device: {jax.devices()[0]}; Python per exe.run call, the step stubbed (CPU microseconds, median)")
    for name, step in sides.items():
        figures = []
        for cold in (False, True):
            times = []
            for _ in range(calls):
                if cold:
                    np.add(big, 1.0, out=big)
                start = clock()
                step(x, y)
                times.append(clock() - start)
            figures.append(statistics.median(times) / 1e3)
        print(f"{name:>9}: hot {figures[0]:5.1f} us, cold {figures[1]:5.1f} us")


# -- memory -----------------------------------------------------------------------------------------
def _status_mb(field: str) -> float:
    """A /proc/self/status size (VmRSS, VmHWM) in MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    raise KeyError(field)


def _reset_peak() -> bool:
    """Restart the kernel's peak-RSS counter (VmHWM) of this process (Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def memory_child(kind: str, steps: int) -> None:
    """Runs in a fresh process: train the big MLP and print its memory figures as JSON.

    ``process_peak``: the whole process's peak RSS (VmHWM, as ``ru_maxrss``), initialisation included.
    ``training_peak``: the peak RSS over steps 2..N (the counter is reset after the first step, which
    also finishes the initialisation and compiles the step).
    """
    import jax  # noqa: F401  (imports count as baseline on both sides)

    if kind == "fluidjax":
        import fluidjax  # noqa: F401
    baseline = _status_mb("VmRSS")
    # Each side initialises the parameters its own way, on the device (no host copies).
    step = fluidjax_trainer(BIG_SIZES) if kind == "fluidjax" else jax_trainer(BIG_SIZES)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, BIG_SIZES[0])).astype(np.float32)
    y = rng.integers(0, BIG_SIZES[-1], (8, 1)).astype(np.int64)
    losses = [float(step(x, y))]
    after_first = _status_mb("VmRSS")
    init_peak = _status_mb("VmHWM")    # read before the reset, which also resets ru_maxrss
    reset = _reset_peak()
    start = time.perf_counter()
    losses += [float(step(x, y)) for _ in range(steps - 1)]
    elapsed = time.perf_counter() - start
    print(json.dumps({
        "process_peak": max(init_peak, _status_mb("VmHWM")),
        "training_peak": _status_mb("VmHWM") if reset else float("nan"),
        "baseline": baseline, "after_first_step": after_first, "final": _status_mb("VmRSS"),
        "seconds_per_step": elapsed / max(steps - 1, 1), "first_loss": losses[0], "last_loss": losses[-1]}))


def measure_memory(steps: int) -> None:
    n_params = sum(a * b + b for a, b in zip(BIG_SIZES, BIG_SIZES[1:]))
    print(f"\nmemory: MLP {'-'.join(map(str, BIG_SIZES))}: {n_params / 1e6:.1f} M parameters "
          f"({n_params * 4 / 2**20:.0f} MiB; with Adam's two moments {3 * n_params * 4 / 2**20:.0f} MiB), "
          f"{steps} Adam steps at batch 8, each side in a fresh process; RSS in MiB")
    results = {}
    for kind in ("fluidjax", "jax"):
        out = subprocess.run([sys.executable, __file__, "--memory-child", kind, "--memory-steps", str(steps)],
                             capture_output=True, text=True, check=True)
        results[kind] = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"{'':>10} {'after imports':>14} {'process peak':>13} {'training peak':>14} {'final':>7} {'s/step':>7}")
    for kind, r in results.items():
        print(f"{kind:>10} {r['baseline']:>14.0f} {r['process_peak']:>13.0f} {r['training_peak']:>14.0f} "
              f"{r['final']:>7.0f} {r['seconds_per_step']:>7.3f}")
    ours, theirs = results["fluidjax"], results["jax"]
    growth = (ours["training_peak"] - ours["baseline"]) / (theirs["training_peak"] - theirs["baseline"])
    print(f"fluidjax/JAX: training peak {ours['training_peak'] / theirs['training_peak']:.2f}, "
          f"training peak above imports {growth:.2f}, process peak {ours['process_peak'] / theirs['process_peak']:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200, help="timed steps at batch 64 (half at 512)")
    parser.add_argument("--memory-steps", type=int, default=200)
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--skip-lenet", action="store_true")
    parser.add_argument("--memory-child", choices=["fluidjax", "jax"])
    parser.add_argument("--ratio", action="store_true", help="only the per-run floor: exe.run / prepare vs JAX")
    parser.add_argument("--repeats", type=int, default=9, help="interleaved passes of --ratio")
    parser.add_argument("--floor", action="store_true", help="only the Python per call, the step stubbed")
    parser.add_argument("--no-index-checks", action="store_true",
                        help="FLAGS_check_index off (fed labels not range-checked): what the default checks cost")
    args = parser.parse_args()
    if args.memory_child:
        memory_child(args.memory_child, args.memory_steps)
        return
    if args.floor:
        python_floor()
        return
    if args.ratio:
        if args.no_index_checks:
            import fluidjax as fj

            fj.set_flags({"FLAGS_check_index": False})
            print("FLAGS_check_index off")
        floor_ratio(args.repeats, args.steps)
        return
    time_steps(args.steps)
    if not args.skip_lenet:
        import train_step_lenet

        print()
        train_step_lenet.time_lenet(64, args.steps)
    if not args.skip_memory:
        measure_memory(args.memory_steps)


if __name__ == "__main__":
    main()
