"""Time to a first result, each measurement in a fresh process: start-up (parameter initialisation),
ResNet-18's first inference run and first training step (compilation cache cold and warm), and
where fluidjax's cold first step goes (trace + lower vs XLA compile), against Paddle 2.6.2's static
Executor and hand-written JAX.

Start-up: the time from ``exe.run(startup)`` until every parameter is ready on the device
(``jax.block_until_ready``); building the program is not timed, nor is bringing up JAX's backend
(``jax.devices()`` runs first on both JAX sides). Models (``models.py``): fc stacks of width 256
with 10, 50, 200 and 1000 layers, ResNet-18 (ImageNet shapes, 1000 classes), a 24-layer
transformer encoder (d_model 512, 8 heads, ffn 2048). Sides: fluidjax (the startup program,
drawn on the host with NumPy); Paddle's Executor running its own startup program of the same
architecture; hand-written JAX: ``jax.jit`` of an init function drawing every parameter with
``jax.random``, first call (compile included) — and the same function run eagerly (op by op,
no ``jit``), which is what a JAX user gets without ``jit``. A hand-written JAX child that runs
longer than ``--jax-timeout`` seconds is stopped and reported as ``>N``; bigger models of the same
family are then not tried with ``jit``. Targets: fc 200 <= 0.5 s, fc 1000 <= 2 s, ResNet-18 <= 0.3 s,
transformer 24 <= 1 s.

First result: ResNet-18's first inference run (``clone(for_test=True)``, batch 1, 3x224x224) and
first training step (Momentum, softmax cross entropy, batch 8): the time of the first
``exe.run`` after the startup program (parameters set to the same NumPy values on every side;
the parent checks the first results agree). fluidjax cold: ``FLUIDJAX_COMPILATION_CACHE`` at a
fresh temporary directory; fluidjax warm: a second process with the same directory; Paddle's
Executor; hand-written ``jax.jit`` (first call, no persistent cache). The second call's time is
shown too. Targets: fluidjax's cold first step <= 1.1x hand-written ``jax.jit``'s first call, and
<= Paddle's first step. The columns after the table split each first call with JAX's own
monitoring events: trace (Python -> jaxpr), MLIR (jaxpr -> StableHLO), XLA (backend compile, or
persistent cache read), rest (everything else: fluidjax's planning, feeding, running the step).

Where the cold training step goes: ``exe.lower(...)`` (planning + trace + lowering) and
``.compile()`` (XLA, with the persistent-cache write) in a fresh process with a fresh cache
directory, against ``jax.jit(step).lower(...)`` / ``.compile()`` of the hand-written step; with
the size of the StableHLO each produces and of the optimized HLO.

    python benchmarks/first_result.py [--only startup|first|breakdown] [--skip-paddle] [--skip-jax]
        [--models fc10,fc50,fc200,fc1000,resnet18,transformer24] [--jax-timeout 60]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

import models

STARTUP_MODELS = ("fc10", "fc50", "fc200", "fc1000", "resnet18", "transformer24")
STARTUP_TARGETS = {"fc200": 0.5, "fc1000": 2.0, "resnet18": 0.3, "transformer24": 1.0}
INFER_BATCH, TRAIN_BATCH = 1, 8
EVENTS = {"/jax/core/compile/jaxpr_trace_duration": "trace",
          "/jax/core/compile/jaxpr_to_mlir_module_duration": "mlir",
          "/jax/core/compile/backend_compile_duration": "xla",
          "/jax/compilation_cache/cache_retrieval_time_sec": "cache_read"}


# == children (each runs in a fresh process and prints one JSON line) ==================================
def _listen() -> list:
    """A list that receives ``(stage, seconds)`` for each of JAX's compile-stage events from now on."""
    import jax

    events: list[tuple[str, float]] = []

    def on_duration(event, seconds, **_):
        if event in EVENTS:
            events.append((EVENTS[event], seconds))

    jax.monitoring.register_event_duration_secs_listener(on_duration)
    return events


def _stages(events: list) -> dict:
    """Seconds per stage, and how many XLA compiles (or cache reads) happened."""
    totals = {name: 0.0 for name in EVENTS.values()}
    for stage, seconds in events:
        totals[stage] += seconds
    totals["compiles"] = sum(1 for stage, _ in events if stage == "xla")
    return totals


def _n_params(model: str) -> int:
    return sum(int(np.prod(shape)) for _, shape, _ in models.specs(model))


def child_startup(side: str, model: str) -> dict:
    if side == "paddle":
        import paddle

        main, startup, _, _, names = models.paddle_model(model)
        scope, place = paddle.static.Scope(), paddle.CPUPlace()
        exe = paddle.static.Executor(place)
        with paddle.static.scope_guard(scope):
            start = time.perf_counter()
            exe.run(startup)     # synchronous on the CPU
            seconds = time.perf_counter() - start
        assert all(scope.find_var(n).get_tensor()._is_initialized() for n in names)
        return {"seconds": seconds}

    import jax

    jax.devices()   # the backend comes up before the timer, on both JAX sides
    if side == "fluidjax":
        import fluidjax as fj

        build = time.perf_counter()
        main, startup, _, _, names = models.fluidjax_model(model)
        build = time.perf_counter() - build
        exe, scope = fj.Executor(), fj.Scope()
        start = time.perf_counter()
        exe.run(startup, scope=scope)
        jax.block_until_ready([scope.find_var(n).get_tensor().value() for n in names])
        return {"seconds": time.perf_counter() - start, "build": build}
    init = models.jax_init_fn(model)
    key = jax.random.PRNGKey(0)
    if side == "jax-jit":
        init = jax.jit(init)
    start = time.perf_counter()
    jax.block_until_ready(init(key))
    return {"seconds": time.perf_counter() - start}


def _images(batch: int):
    rng = np.random.default_rng(1)
    img = rng.standard_normal((batch, *models.IMAGE)).astype(np.float32)
    label = rng.integers(0, models.CLASSES, (batch, 1)).astype(np.int64)
    return img, label


def child_first(side: str, task: str) -> dict:
    """The first and second run of ResNet-18 inference (``task="infer"``) or a training step."""
    train = task == "train"
    img, label = _images(TRAIN_BATCH if train else INFER_BATCH)
    values = models.numpy_params("resnet18")
    if side == "paddle":
        import paddle

        main, startup, feeds, out, names = models.paddle_model("resnet18", train=train, for_test=not train)
        scope, place = paddle.static.Scope(), paddle.CPUPlace()
        exe = paddle.static.Executor(place)
        feed = dict(zip(feeds, (img, label)))
        with paddle.static.scope_guard(scope):
            exe.run(startup)
            for name, value in zip(names, values):
                scope.find_var(name).get_tensor().set(value, place)

            def run():
                return exe.run(main, feed=feed, fetch_list=[out])[0]

            return _first_two(run, None)

    import jax

    jax.devices()
    events = _listen()
    if side == "fluidjax":
        import fluidjax as fj

        main, startup, feeds, out, names = models.fluidjax_model("resnet18", train=train, for_test=not train)
        exe, scope = fj.Executor(), fj.Scope()
        exe.run(startup, scope=scope)
        for name, value in zip(names, values):
            scope.find_var(name).get_tensor().set(value)
        jax.block_until_ready([scope.find_var(n).get_tensor().value() for n in names])
        feed = dict(zip(feeds, (img, label)))

        def run():
            return exe.run(main, feed=feed, fetch_list=[out], scope=scope)[0]

        return _first_two(run, events)
    if train:
        step, state = models.jax_resnet18_train(values)
        jax.block_until_ready(state)

        def run():
            nonlocal state
            state, loss = step(state, img, label)
            return np.asarray(loss)
    else:
        forward = models.jax_resnet18_infer()
        params = jax.block_until_ready([jax.numpy.asarray(v) for v in values])

        def run():
            return np.asarray(forward(params, img))

    return _first_two(run, events)


def _first_two(run, events: list | None) -> dict:
    """Time the first and the second call of ``run``, with JAX's compile stages of each."""
    calls = []
    for _ in range(2):
        if events is not None:
            events.clear()
        start = time.perf_counter()
        result = run()
        calls.append((time.perf_counter() - start, _stages(events) if events is not None else None, result))
    first = np.asarray(calls[0][2], np.float64)
    return {"first": calls[0][0], "second": calls[1][0], "stages": calls[0][1], "second_stages": calls[1][1],
            "result": float(first) if first.ndim == 0 else [float(first.sum()), float(np.abs(first).sum())]}


def child_breakdown(side: str) -> dict:
    """Lower and compile ResNet-18's training step explicitly (nothing runs)."""
    import jax

    jax.devices()
    events = _listen()
    img, label = _images(TRAIN_BATCH)
    values = models.numpy_params("resnet18")
    if side == "fluidjax":
        import fluidjax as fj

        main, startup, feeds, out, names = models.fluidjax_model("resnet18", train=True)
        exe, scope = fj.Executor(), fj.Scope()
        exe.run(startup, scope=scope)
        for name, value in zip(names, values):
            scope.find_var(name).get_tensor().set(value)

        def lower():
            return exe.lower(main, dict(zip(feeds, (img, label))), [out], scope)
    else:
        step, state = models.jax_resnet18_train(values)

        def lower():
            return step.lower(state, img, label)

    events.clear()
    start = time.perf_counter()
    lowered = lower()
    lower_s = time.perf_counter() - start
    lower_stages = _stages(events)
    events.clear()
    start = time.perf_counter()
    compiled = lowered.compile()
    compile_s = time.perf_counter() - start
    return {"lower": lower_s, "compile": compile_s, "trace": lower_stages["trace"], "mlir": lower_stages["mlir"],
            "xla": _stages(events)["xla"],
            "stablehlo_lines": lowered.as_text().count("\n"), "hlo_lines": compiled.as_text().count("\n")}


# == the parent ====================================================================================
def _child(args: list[str], env: dict | None = None, timeout: float | None = None) -> dict:
    full_env = dict(os.environ)
    full_env.pop("JAX_COMPILATION_CACHE_DIR", None)   # no side gets a cache it was not given
    full_env.setdefault("GLOG_minloglevel", "2")
    full_env.update(env or {})
    try:
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", *args], capture_output=True,
                             text=True, env=full_env, timeout=timeout, cwd=os.path.dirname(os.path.abspath(__file__)))
    except subprocess.TimeoutExpired:
        return {"timeout": timeout}
    lines = out.stdout.strip().splitlines()
    if out.returncode != 0 or not lines:
        tail = (out.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"error": f"exit {out.returncode}: {tail}"}
    return json.loads(lines[-1])


def _seconds(result: dict | None, width: int = 10) -> str:
    if result is None:
        return f"{'-':>{width}}"
    if "timeout" in result:
        return f"{'>' + format(result['timeout'], '.0f'):>{width}}"
    if "error" in result:
        return f"{'error':>{width}}"
    return f"{result['seconds']:>{width}.3f}"


def _ratio(a: dict | None, b: dict | None, width: int) -> str:
    if a and b and "seconds" in a and "seconds" in b:
        return f"{a['seconds'] / b['seconds']:>{width}.2f}"
    if a and b and "seconds" in a and "timeout" in b:
        return f"{'<' + format(a['seconds'] / b['timeout'], '.3f'):>{width}}"
    return f"{'-':>{width}}"


def run_startup(names: list[str], skip_paddle: bool, skip_jax: bool, jax_timeout: float) -> None:
    print("start-up: seconds from exe.run(startup) until every parameter is ready, one fresh process per cell")
    print(f"{'model':<14} {'params':>8} {'tensors':>8} {'build':>7} {'fluidjax':>10} {'Paddle':>10} {'JAX jit':>10} "
          f"{'JAX eager':>10} {'target':>7} {'fluidjax/jit':>13} {'fluidjax/eager':>15} {'Paddle/fluidjax':>16}")
    timed_out: set[str] = set()
    errors = []
    for model in names:
        family = "fc" if model.startswith("fc") else model
        results = {"fluidjax": _child(["startup", "fluidjax", model])}
        if not skip_paddle:
            results["paddle"] = _child(["startup", "paddle", model])
        if not skip_jax:
            if family in timed_out:
                results["jax-jit"] = {"timeout": jax_timeout}
            else:
                results["jax-jit"] = _child(["startup", "jax-jit", model], timeout=jax_timeout)
                if "timeout" in results["jax-jit"]:
                    timed_out.add(family)
            results["jax-eager"] = _child(["startup", "jax-eager", model], timeout=jax_timeout)
        errors += [f"{model} {side}: {r['error']}" for side, r in results.items() if "error" in r]
        ours = results["fluidjax"]
        build = f"{ours['build']:>7.2f}" if "build" in ours else f"{'-':>7}"
        target = STARTUP_TARGETS.get(model)
        print(f"{model:<14} {_n_params(model) / 1e6:>7.2f}M {len(models.specs(model)):>8} {build} {_seconds(ours)} "
              f"{_seconds(results.get('paddle'))} {_seconds(results.get('jax-jit'))} "
              f"{_seconds(results.get('jax-eager'))} {(format(target, '.1f') if target else '-'):>7} "
              f"{_ratio(ours, results.get('jax-jit'), 13)} {_ratio(ours, results.get('jax-eager'), 15)} "
              f"{_ratio(results.get('paddle'), ours, 16)}", flush=True)
    print("build: seconds to build the fluidjax program (not in the start-up time); >N: the hand-written JAX "
          "child was stopped after N seconds (jit: bigger models of its family are not tried); targets in seconds")
    for line in errors:
        print("  error:", line)


def run_first(skip_paddle: bool, skip_jax: bool) -> None:
    cache = tempfile.mkdtemp(prefix="fluidjax-xla-")
    try:
        env = {"FLUIDJAX_COMPILATION_CACHE": cache}
        rows = {}
        for task in ("infer", "train"):
            r = {"fluidjax cold": _child(["first", "fluidjax", task], env)}
            r["fluidjax warm"] = _child(["first", "fluidjax", task], env)
            if not skip_paddle:
                r["Paddle"] = _child(["first", "paddle", task])
            if not skip_jax:
                r["jax.jit"] = _child(["first", "jax", task])
            rows[task] = r
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    print(f"\nResNet-18 first result: seconds of the first exe.run after startup (then the second), one fresh "
          f"process each; inference: for_test clone, batch {INFER_BATCH}; training: Momentum step, batch {TRAIN_BATCH}")
    print(f"{'':<7} {'side':<14} {'first':>8} {'second':>8} {'trace':>7} {'MLIR':>7} {'XLA':>7} {'(cache read)':>12} "
          f"{'rest':>7} {'compiles':>9}  first result")
    for task, r in rows.items():
        for side, res in r.items():
            if "error" in res or "timeout" in res:
                print(f"{task:<7} {side:<14} {res.get('error', 'timeout')}")
                continue
            st, st2 = res["stages"], res["second_stages"]
            if st:
                rest = res["first"] - st["trace"] - st["mlir"] - st["xla"]
                stages = (f"{st['trace']:>7.2f} {st['mlir']:>7.2f} {st['xla']:>7.2f} {st['cache_read']:>12.2f} "
                          f"{rest:>7.2f} {str(st['compiles']) + ' + ' + str(st2['compiles']):>9}")
            else:
                stages = f"{'-':>7} {'-':>7} {'-':>7} {'-':>12} {'-':>7} {'-':>9}"
            result = res["result"]
            shown = f"loss {result:.6f}" if isinstance(result, float) else f"logits sum {result[0]:.4f}"
            print(f"{task:<7} {side:<14} {res['first']:>8.3f} {res['second']:>8.3f} {stages}  {shown}")
    for task, r in rows.items():
        ok = {k: v for k, v in r.items() if "first" in v}
        cold = ok.get("fluidjax cold")
        if not cold:
            continue
        parts = [f"{task}: fluidjax cold / jax.jit {cold['first'] / ok['jax.jit']['first']:.2f} (target <= 1.10)"
                 if "jax.jit" in ok else None,
                 f"fluidjax cold / Paddle {cold['first'] / ok['Paddle']['first']:.2f} (target <= 1.00)"
                 if "Paddle" in ok else None,
                 f"fluidjax warm / cold {ok['fluidjax warm']['first'] / cold['first']:.2f}"
                 if "fluidjax warm" in ok else None]
        print("  " + ", ".join(p for p in parts if p))
        firsts = [v["result"] for v in ok.values()]
        flat = [f if isinstance(f, float) else f[1] for f in firsts]
        agree = np.allclose(flat, flat[0], rtol=2e-3)
        print(f"  {task}: first results agree across sides (rtol 2e-3): {agree}")
    print("trace/MLIR/XLA: JAX's monitoring durations during the first call (XLA = backend compile, or the "
          "persistent cache read shown in parentheses); rest = first - trace - MLIR - XLA; compiles: XLA "
          "compilations (or cache reads) during the first + the second call")


def run_breakdown(skip_jax: bool) -> None:
    cache = tempfile.mkdtemp(prefix="fluidjax-xla-")
    try:
        results = {"fluidjax": _child(["breakdown", "fluidjax"], {"FLUIDJAX_COMPILATION_CACHE": cache})}
        if not skip_jax:
            results["jax.jit"] = _child(["breakdown", "jax"])
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    print(f"\nResNet-18 training step (batch {TRAIN_BATCH}), cold, fresh process each: explicit lower and compile, "
          f"seconds")
    print(f"{'side':<10} {'lower':>7} {'(trace':>7} {'MLIR':>7} {'other)':>7} {'compile':>8} {'total':>7} "
          f"{'StableHLO lines':>16} {'HLO lines':>10}")
    for side, r in results.items():
        if "error" in r:
            print(f"{side:<10} {r['error']}")
            continue
        other = r["lower"] - r["trace"] - r["mlir"]
        print(f"{side:<10} {r['lower']:>7.2f} {r['trace']:>7.2f} {r['mlir']:>7.2f} {other:>7.2f} {r['compile']:>8.2f} "
              f"{r['lower'] + r['compile']:>7.2f} {r['stablehlo_lines']:>16} {r['hlo_lines']:>10}")
    ours, theirs = results.get("fluidjax"), results.get("jax.jit")
    if ours and theirs and "lower" in ours and "lower" in theirs:
        print(f"fluidjax - jax.jit: lower {ours['lower'] - theirs['lower']:+.2f} s, compile "
              f"{ours['compile'] - theirs['compile']:+.2f} s; fluidjax's lower = exe.lower (feed checks, planning, "
              "trace of the op rules, MLIR); its compile includes writing the persistent cache entry")


def child_main(argv: list[str]) -> None:
    kind = argv[0]
    if kind == "startup":
        result = child_startup(argv[1], argv[2])
    elif kind == "first":
        result = child_first(argv[1], argv[2])
    else:
        result = child_breakdown(argv[1])
    print(json.dumps(result))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child_main(sys.argv[2:])
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", choices=["startup", "first", "breakdown"])
    parser.add_argument("--skip-paddle", action="store_true")
    parser.add_argument("--skip-jax", action="store_true", help="skip the hand-written JAX sides")
    parser.add_argument("--models", default=",".join(STARTUP_MODELS), help="start-up models, comma-separated")
    parser.add_argument("--jax-timeout", type=float, default=60.0,
                        help="seconds before a hand-written JAX start-up child is stopped")
    args = parser.parse_args()
    import jax

    started = time.perf_counter()
    print(f"device: {jax.devices()[0]} ({os.cpu_count()} CPUs); jax {jax.__version__}")
    if args.only in (None, "startup"):
        run_startup(args.models.split(","), args.skip_paddle, args.skip_jax, args.jax_timeout)
    if args.only in (None, "first"):
        run_first(args.skip_paddle, args.skip_jax)
    if args.only in (None, "breakdown"):
        run_breakdown(args.skip_jax)
    print(f"\ntotal {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
