"""Data-parallel step time: one device vs 8 forced host devices vs 2 local processes.

    python benchmarks/data_parallel.py [--steps 30] [--models mlp,resnet]

Every cell runs in a fresh process (the device count is fixed when JAX starts): the MLP
(784-1024-1024-10, batch 256, Adam) and a small ResNet (3x32x32, conv-bn stem and 4 residual
blocks of 32 channels, batch 64, Momentum) train at the same *global* batch

- on one device (``exe.run(main)``),
- data-parallel over 8 forced host devices, under each sharding mode,
- data-parallel over 2 processes of 1 device each, started by ``fluidjax.distributed.launch``
  (gloo collectives over localhost).

Printed: the median step time after warm-up, and its ratio to one device. On a CPU host the
forced devices share the same cores, so no speedup is possible: the ratio is the cost of
partitioning the step (collectives, per-device dispatch); the target is <= 1.3x.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

MODES = ("none", "optimizer", "full")


def build(model: str):
    import numpy as np

    import fluidjax as fj
    from fluidjax import layer

    main, startup = fj.Program(), fj.Program()
    main.random_seed = startup.random_seed = 1
    rng = np.random.default_rng(0)
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        y = layer.data("y", dims=1, dtype="int64")
        if model == "mlp":
            x = layer.data("x", input_size=784)
            h = layer.fc(layer.fc(x, 1024, activation="relu"), 1024, activation="relu")
            cost = layer.mean(layer.cross_entropy(layer.fc(h, 10, activation="softmax"), y))
            fj.optimizer.Adam(learning_rate=1e-3).minimize(cost)
            batch = 256
            data = {"x": rng.standard_normal((batch, 784)).astype(np.float32)}
        else:
            x = layer.data("x", shape=[3, 32, 32])

            def conv_bn(v, relu=True):
                c = layer.conv2d(v, 32, 3, padding=1, bias_attr=False)
                return layer.batch_norm(c, activation="relu" if relu else None)
            h = conv_bn(x)
            for _ in range(4):
                h = layer.relu(layer.elementwise_add(h, conv_bn(conv_bn(h), relu=False)))
            pooled = layer.pool2d(h, pool_type="avg", global_pooling=True)
            cost = layer.mean(layer.cross_entropy(layer.fc(pooled, 10, activation="softmax"), y))
            fj.optimizer.Momentum(learning_rate=0.1, momentum=0.9).minimize(cost)
            batch = 64
            data = {"x": rng.standard_normal((batch, 3, 32, 32)).astype(np.float32)}
        data["y"] = rng.integers(0, 10, (batch, 1)).astype(np.int64)
    return main, startup, cost, data


def time_steps(exe, program, feed, cost, scope, steps: int) -> float:
    for _ in range(3):                                       # compile and warm up
        exe.run(program, feed=feed, fetch_list=[cost], scope=scope)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        exe.run(program, feed=feed, fetch_list=[cost], scope=scope)
        times.append(time.perf_counter() - start)
    times.sort()
    return times[len(times) // 2]


def child(cell: str, model: str, steps: int, out: str | None) -> None:
    import jax

    import fluidjax as fj
    if cell == "2proc":
        fj.distributed.init()
    main, startup, cost, data = build(model)
    exe, result = fj.Executor(), {}
    if cell == "single":
        scope = fj.Scope()
        exe.run(startup, scope=scope)
        result["single"] = time_steps(exe, main, data, cost, scope, steps)
    else:
        rank, nproc = jax.process_index(), jax.process_count()
        rows = len(data["y"]) // nproc
        feed = {k: v[rank * rows:(rank + 1) * rows] for k, v in data.items()}
        for mode in (MODES if cell == "dp8" else ("none",)):
            scope = fj.Scope()
            exe.run(startup, scope=scope)
            compiled = fj.CompiledProgram(main, fj.BuildStrategy(sharding=mode)).with_data_parallel()
            result[mode] = time_steps(exe, compiled, feed, cost, scope, steps)
        if rank != 0:
            return
    text = json.dumps(result)
    if out:
        with open(out, "w") as f:
            f.write(text)
    else:
        print(text)


def run_cell(cell: str, model: str, steps: int) -> dict:
    here = os.path.abspath(__file__)
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env["XLA_FLAGS"] = " ".join(f for f in env.get("XLA_FLAGS", "").split()
                                if not f.startswith("--xla_force_host_platform_device_count"))
    if cell == "dp8":
        env["XLA_FLAGS"] += " --xla_force_host_platform_device_count=8"
    if cell == "2proc":
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "out.json")
            subprocess.run([sys.executable, "-m", "fluidjax.distributed.launch", "--nproc", "2",
                            "--devices-per-proc", "1", "--timeout", "600", here, "--child", cell, "--model", model,
                            "--steps", str(steps), "--out", out], env=env, check=True)
            with open(out) as f:
                return json.load(f)
    proc = subprocess.run([sys.executable, here, "--child", cell, "--model", model, "--steps", str(steps)],
                          env=env, check=True, capture_output=True, text=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp,resnet")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.model, args.steps, args.out)
        return
    print(f"{'model':7s} {'cell':22s} {'step ms':>9s} {'/ single':>9s}")
    for model in args.models.split(","):
        single = run_cell("single", model, args.steps)["single"]
        print(f"{model:7s} {'1 device':22s} {single * 1e3:9.2f} {1.0:9.2f}", flush=True)
        for cell, label in (("dp8", "8 devices, sharding="), ("2proc", "2 processes, sharding=")):
            for mode, t in run_cell(cell, model, args.steps).items():
                print(f"{model:7s} {label + mode:22s} {t * 1e3:9.2f} {t / single:9.2f}", flush=True)


if __name__ == "__main__":
    main()
