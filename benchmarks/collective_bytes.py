"""Collective bytes per training step, read from the compiled HLO of a data-parallel step.

    python benchmarks/collective_bytes.py                       # mlp, resnet50, transformer1b on 8 devices
    python benchmarks/collective_bytes.py --models resnet50 --devices 64

For each model and sharding mode (``fj.BuildStrategy(sharding=...)``) the step of
``fj.CompiledProgram(main).with_data_parallel()`` over N forced host devices is lowered and
compiled — never run, and no parameter is allocated: the arguments are shapes — and the
collectives of its optimized HLO are listed: how many of each kind, the bytes of their results,
and the bytes one device sends with ring algorithms (``lowering.parallel.collective_traffic``).
These are the figures of ``docs/scaling.md``.

The 1B-parameter transformer (20 layers, d_model 2048, ffn 8192, sequence 128) is measured at 1
and 2 layers and extrapolated linearly to 20 (its layers are identical, so the per-layer bytes
are exact); ``--full-transformer`` compiles all 20 layers instead (minutes, several GB of RAM).
"""

from __future__ import annotations

import argparse
import os
import sys

if __name__ == "__main__":
    _devices = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--devices=")), None)
    if _devices is None and "--devices" in sys.argv:
        _devices = sys.argv[sys.argv.index("--devices") + 1]
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                               + f" --xla_force_host_platform_device_count={_devices or 8}").strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import numpy as np  # noqa: E402

import fluidjax as fj  # noqa: E402
from fluidjax import layer  # noqa: E402
from fluidjax.ir import dtypes  # noqa: E402
from fluidjax.lowering.parallel import collective_traffic, collectives  # noqa: E402

MODES = ("none", "optimizer", "full")
KINDS = ("all-reduce", "reduce-scatter", "all-gather", "all-to-all", "collective-permute")


# -- models -------------------------------------------------------------------------------------------
def mlp():
    x = layer.data("x", input_size=784)
    y = layer.data("y", dims=1, dtype="int64")
    h = layer.fc(x, 200, activation="relu")
    cost = layer.mean(layer.cross_entropy(layer.fc(h, 10, activation="softmax"), y))
    fj.optimizer.Adam(learning_rate=1e-3).minimize(cost)
    return cost, {"x": (784,), "y": (1,)}


def resnet50():
    """ResNet-50 v1.5 (bottlenecks 3-4-6-3, stride in the 3x3), 224x224, 1000 classes, Momentum."""
    img = layer.data("img", shape=[3, 224, 224])
    y = layer.data("y", dims=1, dtype="int64")

    def conv_bn(x, channels, size, stride=1, relu=True):
        c = layer.conv2d(x, channels, size, stride=stride, padding=(size - 1) // 2, bias_attr=False)
        return layer.batch_norm(c, activation="relu" if relu else None)

    h = conv_bn(img, 64, 7, 2)
    h = layer.pool2d(h, 3, "max", 2, 1)
    channels = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(blocks):
            s = stride if i == 0 else 1
            b = conv_bn(conv_bn(conv_bn(h, width, 1), width, 3, s), width * 4, 1, relu=False)
            short = conv_bn(h, width * 4, 1, s, relu=False) if (s != 1 or channels != width * 4) else h
            h = layer.relu(layer.elementwise_add(b, short))
            channels = width * 4
    pooled = layer.pool2d(h, pool_type="avg", global_pooling=True)
    cost = layer.mean(layer.cross_entropy(layer.fc(pooled, 1000, activation="softmax"), y))
    fj.optimizer.Momentum(learning_rate=0.1, momentum=0.9).minimize(cost)
    return cost, {"img": (3, 224, 224), "y": (1,)}


def transformer(layers: int, d_model: int = 2048, ffn: int = 8192, seq: int = 128):
    """``layers`` post-norm encoder layers (q/k/v/out projections, single-head attention: the
    parameters and their bytes are those of any head count), Adam; ~50M parameters a layer."""
    x = layer.data("x", shape=[seq, d_model])
    h = x
    for _ in range(layers):
        q, k, v = (layer.fc(h, d_model, num_flatten_dims=2) for _ in range(3))
        scores = layer.softmax(layer.matmul(q, k, transpose_y=True, alpha=d_model ** -0.5))
        a = layer.fc(layer.matmul(scores, v), d_model, num_flatten_dims=2)
        h = layer.layer_norm(layer.elementwise_add(h, a), begin_norm_axis=2)
        f = layer.fc(layer.fc(h, ffn, activation="relu", num_flatten_dims=2), d_model, num_flatten_dims=2)
        h = layer.layer_norm(layer.elementwise_add(h, f), begin_norm_axis=2)
    cost = layer.mean(layer.square(h))
    fj.optimizer.Adam(learning_rate=1e-4).minimize(cost)
    return cost, {"x": (seq, d_model)}


# -- measuring ------------------------------------------------------------------------------------------
def step_collectives(build, mode: str, batch: int) -> tuple[dict, int, int]:
    """({kind: (count, result bytes, bytes sent per device)}, parameter count, parameter bytes) of
    one compiled step of ``build``'s program under ``mode``."""
    main, startup = fj.Program(), fj.Program()
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        cost, feeds = build()
    compiled = fj.CompiledProgram(main, fj.BuildStrategy(sharding=mode)).with_data_parallel()
    exe = fj.Executor()
    plan = exe._plan(compiled, tuple(sorted(feeds)), (cost.name,))
    block = main.global_block()

    def struct(name, shape=None):
        var = block.var(name)
        return jax.ShapeDtypeStruct(tuple(shape or var.shape), dtypes.to_numpy(var.dtype))

    args = (tuple(struct(n) for n in plan.mutable_state), tuple(struct(n) for n in plan.const_state),
            tuple(struct(n, (batch, *feeds[n])) for n in plan.feed_names),
            np.zeros(2, np.uint32) if plan.random else None)
    hlo = plan.step.jitted.lower(*args).compile().as_text()
    n = jax.device_count()
    table: dict[str, list] = {}
    for kind, nbytes in collectives(hlo):
        row = table.setdefault(kind, [0, 0, 0.0])
        row[0] += 1
        row[1] += nbytes
        row[2] += collective_traffic(kind, nbytes, n)
    params = [v for v in block.vars.values() if v.is_parameter and getattr(v, "trainable", False)]
    count = sum(int(np.prod(v.shape)) for v in params)
    nbytes = sum(int(np.prod(v.shape)) * np.dtype(dtypes.to_numpy(v.dtype)).itemsize for v in params)
    return {k: tuple(v) for k, v in table.items()}, count, nbytes


def extrapolated(mode: str, batch: int, layers: int) -> tuple[dict, int, int]:
    """The transformer's table at ``layers`` layers from exact measurements at 1 and 2."""
    one, c1, b1 = step_collectives(lambda: transformer(1), mode, batch)
    two, c2, b2 = step_collectives(lambda: transformer(2), mode, batch)
    table = {}
    for kind in set(one) | set(two):
        a, b = np.array(one.get(kind, (0, 0, 0.0)), float), np.array(two.get(kind, (0, 0, 0.0)), float)
        table[kind] = tuple(a + (b - a) * (layers - 1))
    return table, int(c1 + (c2 - c1) * (layers - 1)), int(b1 + (b2 - b1) * (layers - 1))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp,resnet50,transformer1b")
    parser.add_argument("--devices", type=int, default=8, help="forced host devices (set before JAX starts)")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--full-transformer", action="store_true", help="compile all 20 layers")
    args = parser.parse_args(argv)
    n = jax.device_count()
    print(f"{n} devices ({jax.devices()[0].platform}); bytes per training step; 'sent/dev' = bytes one device "
          "sends with ring algorithms")
    print(f"{'model':14s} {'mode':9s} {'params':>13s} {'param MB':>9s} " + " ".join(f"{k:>24s}" for k in KINDS[:3])
          + f" {'sent/dev MB':>12s}")
    for model in args.models.split(","):
        for mode in args.modes.split(","):
            if model == "transformer1b" and not args.full_transformer:
                table, count, nbytes = extrapolated(mode, n, 20)
            else:
                build = {"mlp": mlp, "resnet50": resnet50, "transformer1b": lambda: transformer(20)}[model]
                table, count, nbytes = step_collectives(build, mode, n)
            cells = []
            for kind in KINDS[:3]:
                c, b, _ = table.get(kind, (0, 0, 0.0))
                cells.append(f"{int(c):4d} x {b / 1e6:10.3f} MB".rjust(24))
            others = [k for k in table if k not in KINDS[:3]]
            sent = sum(v[2] for v in table.values())
            print(f"{model:14s} {mode:9s} {count:13,d} {nbytes / 1e6:9.1f} " + " ".join(cells)
                  + f" {sent / 1e6:12.2f}" + (f"  (also {others})" if others else ""), flush=True)


if __name__ == "__main__":
    main()
