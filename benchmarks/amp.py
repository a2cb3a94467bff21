"""Step time of a small transformer encoder, float32 against ``fj.amp.decorate`` mixed precision
(bfloat16 O1 and O2 by default; float16 O1 with ``--configs``).

Model: token + position embeddings, ``--layers`` post-norm encoder blocks (q, k, v as fc;
matmul scaled by 1/sqrt(d_head); softmax; matmul; output fc; residual; layer_norm; fc 2d relu, fc
d; residual; layer_norm), mean over the sequence, fc to 4 classes, softmax cross entropy, Adam.

Each configuration is compiled and warmed up first; then ``--repeats`` rounds each time one step
of every configuration in turn (interleaved, so a busy machine slows all alike). Printed: the
number of cast ops, XLA's temporaries of the compiled step (``fj.compiled_memory``), the median
step time, its spread (min-max) and the ratio to float32, and one JSON line.

    python benchmarks/amp.py [--layers 2 --width 256 --heads 4 --seq 64 --batch 16 --repeats 15]
                             [--configs fp32,bf16-O1,bf16-O2,fp16-O1]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

CONFIGS = {"fp32": None, "bf16-O1": dict(level="O1", dtype="bfloat16"), "bf16-O2": dict(level="O2", dtype="bfloat16"),
           "fp16-O1": dict(level="O1", dtype="float16")}


def build(cfg, amp):
    import fluidjax as fj
    from fluidjax import layer

    main, startup = fj.Program(), fj.Program()
    d, t, heads = cfg.width, cfg.seq, cfg.heads
    dh = d // heads
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        ids = layer.data("ids", dims=[t], dtype="int64")
        pos = layer.data("pos", dims=[t], dtype="int64")
        label = layer.data("label", dims=1, dtype="int64")
        x = fj.embedding(ids, [cfg.vocab, d]) + fj.embedding(pos, [t, d])

        def split_heads(v):
            return layer.transpose(layer.reshape(v, [0, t, heads, dh]), [0, 2, 1, 3])

        for _ in range(cfg.layers):
            q, k, v = (split_heads(layer.fc(x, d, num_flatten_dims=2)) for _ in range(3))
            att = layer.softmax(layer.matmul(q, k, transpose_y=True, alpha=dh ** -0.5))
            ctx = layer.reshape(layer.transpose(layer.matmul(att, v), [0, 2, 1, 3]), [0, t, d])
            x = layer.layer_norm(x + layer.fc(ctx, d, num_flatten_dims=2), begin_norm_axis=2)
            ff = layer.fc(layer.fc(x, 2 * d, num_flatten_dims=2, activation="relu"), d, num_flatten_dims=2)
            x = layer.layer_norm(x + ff, begin_norm_axis=2)
        logits = layer.fc(layer.reduce_mean(x, dim=1), 4)
        loss = layer.mean(layer.softmax_with_cross_entropy(logits, label))
        opt = fj.optimizer.Adam(1e-3)
        if amp is not None:
            opt = fj.amp.decorate(opt, **amp)
        opt.minimize(loss)
    return main, startup, loss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name, default in (("layers", 2), ("width", 256), ("heads", 4), ("seq", 64), ("batch", 16), ("vocab", 1000),
                          ("repeats", 15), ("warmup", 3)):
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--configs", default="fp32,bf16-O1,bf16-O2")
    cfg = parser.parse_args()

    import jax
    import fluidjax as fj

    rng = np.random.default_rng(0)
    ids = rng.integers(0, cfg.vocab, (cfg.batch, cfg.seq)).astype("int64")
    feed = {"ids": ids, "pos": np.tile(np.arange(cfg.seq), (cfg.batch, 1)).astype("int64"),
            "label": (ids[:, :1] % 4).astype("int64")}
    names = cfg.configs.split(",")
    runs = {}
    for name in names:
        prog, startup, loss = build(cfg, CONFIGS[name])
        exe, scope = fj.Executor(), fj.Scope()
        exe.run(startup, scope=scope)
        casts = sum(op.type == "cast" for op in prog.global_block().ops)

        def step(prog=prog, exe=exe, scope=scope, loss=loss):
            # The fetched loss comes back as NumPy: the step has finished when run returns.
            out, = exe.run(prog, feed=feed, fetch_list=[loss], scope=scope)
            return out

        for _ in range(cfg.warmup):
            step()
        memory = fj.compiled_memory(prog, feed, scope=scope, fetch_list=[loss])
        runs[name] = (step, casts, [], memory["temp_bytes"])
    for _ in range(cfg.repeats):
        for name in names:
            step, _, times, _ = runs[name]
            start = time.perf_counter()
            step()
            times.append(time.perf_counter() - start)
    base = statistics.median(runs[names[0]][2])
    result = {"device": str(jax.devices()[0]), "model": {k: getattr(cfg, k) for k in
                                                         ("layers", "width", "heads", "seq", "batch", "vocab")}}
    print(f"{'config':10s} {'casts':>5s} {'temp MiB':>9s} {'median ms':>10s} {'min-max ms':>16s} "
          f"{'vs ' + names[0]:>8s}")
    for name in names:
        _, casts, times, temp = runs[name]
        med = statistics.median(times)
        print(f"{name:10s} {casts:5d} {temp / 2**20:9.2f} {med * 1e3:10.2f} "
              f"{min(times) * 1e3:7.2f}-{max(times) * 1e3:7.2f} {med / base:8.2f}")
        result[name] = {"median_ms": round(med * 1e3, 3), "min_ms": round(min(times) * 1e3, 3),
                        "max_ms": round(max(times) * 1e3, 3), "ratio": round(med / base, 3), "casts": casts,
                        "temp_bytes": int(temp)}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
