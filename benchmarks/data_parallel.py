"""Data-parallel step time: one device vs 8 forced host devices vs 2 local processes.

    python benchmarks/data_parallel.py [--steps 30] [--models mlp,resnet,lstm]

Every cell runs in a fresh process (the device count is fixed when JAX starts): the MLP
(784-1024-1024-10, batch 256, Adam) and a small ResNet (3x32x32, conv-bn stem and 4 residual
blocks of 32 channels, batch 64, Momentum) and the book's stacked-LSTM sentiment net on LoD feeds
(64 sentences of 5..40 words, Adam; each device runs its share of the sentences) train at the
same *global* batch

- on one device (``exe.run(main)``),
- data-parallel over 8 forced host devices, under each sharding mode,
- data-parallel over 2 processes of 1 device each, started by ``fluidjax.distributed.launch``
  (gloo collectives over localhost).

Printed: the median step time after warm-up (wall, and CPU time of all threads — of both
processes in the 2-process cell), and their ratios to one device. On a CPU host the forced
devices share the same cores, so no speedup is possible: the CPU-time ratio is the work that
partitioning adds (collectives, per-device dispatch, and under ``sharding="none"`` the optimizer
update, which every device repeats on its replicated copy); the target is <= 1.3x.
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
        if model == "lstm":
            # The book's stacked-LSTM sentiment net on LoD feeds: 64 sentences of 5..40 words,
            # 8 per device; each device runs its share (shard_map), gradients averaged.
            try:
                from benchmarks import book_models as bm
            except ImportError:      # run as a script: benchmarks/ is on the path
                import book_models as bm
            net = bm.understand_sentiment_lstm(dict_dim=1000, emb_dim=32, hid_dim=64)
            fj.optimizer.Adam(learning_rate=1e-3).minimize(net.loss)
            ids, lengths, labels = next(bm.sentiment_batches(1, 64, dict_dim=1000, low=5, high=40, seed=0))
            return main, startup, net.loss, {"words": fj.create_lod_tensor(ids, [lengths]), "label": labels}
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


def time_steps(exe, program, feed, cost, scope, steps: int) -> tuple[float, float]:
    """(median wall seconds, median CPU seconds of this process, all threads) of one step."""
    for _ in range(3):                                       # compile and warm up
        exe.run(program, feed=feed, fetch_list=[cost], scope=scope)
    times, cpu = [], []
    for _ in range(steps):
        start, start_cpu = time.perf_counter(), time.process_time()
        exe.run(program, feed=feed, fetch_list=[cost], scope=scope)
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return sorted(times)[len(times) // 2], sorted(cpu)[len(cpu) // 2]


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
        if nproc == 1:
            feed = data              # the global batch (a LoD one is split per device by the step)
        else:
            rows = len(data["y"]) // nproc
            feed = {k: v[rank * rows:(rank + 1) * rows] for k, v in data.items()}
        for mode in (MODES if cell == "dp8" and model != "lstm" else ("none",)):
            scope = fj.Scope()
            exe.run(startup, scope=scope)
            compiled = fj.CompiledProgram(main, fj.BuildStrategy(sharding=mode)).with_data_parallel()
            result[mode] = time_steps(exe, compiled, feed, cost, scope, steps)
    text = json.dumps(result)
    if out:
        with open(f"{out}.{jax.process_index()}", "w") as f:
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
            ranks = []
            for rank in range(2):
                with open(f"{out}.{rank}") as f:
                    ranks.append(json.load(f))
            # Wall time: process 0's; CPU time: both processes' (the step's whole work).
            return {mode: (ranks[0][mode][0], sum(r[mode][1] for r in ranks)) for mode in ranks[0]}
    proc = subprocess.run([sys.executable, here, "--child", cell, "--model", model, "--steps", str(steps)],
                          env=env, check=True, capture_output=True, text=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp,resnet,lstm")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.model, args.steps, args.out)
        return
    print(f"{'model':7s} {'cell':32s} {'step ms':>9s} {'/ single':>9s} {'CPU ms':>9s} {'/ single':>9s}")
    for model in args.models.split(","):
        single, single_cpu = run_cell("single", model, args.steps)["single"]
        print(f"{model:7s} {'1 device':32s} {single * 1e3:9.2f} {1.0:9.2f} {single_cpu * 1e3:9.2f} {1.0:9.2f}",
              flush=True)
        for cell, label in (("dp8", "8 devices, sharding="), ("2proc", "2 processes, sharding=")):
            if model == "lstm" and cell == "2proc":
                continue          # its LoD batch is split per device by the step, not per process here
            for mode, (t, cpu) in run_cell(cell, model, args.steps).items():
                print(f"{model:7s} {label + mode:32s} {t * 1e3:9.2f} {t / single:9.2f} {cpu * 1e3:9.2f} "
                      f"{cpu / single_cpu:9.2f}", flush=True)


if __name__ == "__main__":
    main()
