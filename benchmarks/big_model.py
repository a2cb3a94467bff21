"""A GPT-style decoder's training step with the memory features on and off: recomputation
(``RecomputeOptimizer``, a checkpoint at every block's output), gradient merge
(``GradientMergeOptimizer``, k micro-batches per update) and, where ``fj.amp`` exists, bfloat16
mixed precision (``fj.amp.decorate``, O1) — against a hand-written JAX step of the same model
(``jax.value_and_grad`` + Paddle's Adam, jitted with donation; with ``jax.checkpoint`` per block
for the recompute row).

Model: token + position embeddings (``lookup_table``), ``--layers`` pre-norm decoder blocks
(layer_norm; q, k, v projections as fc; causal attention: matmul scaled by 1/sqrt(d_head), a fed
additive mask, softmax, matmul; output projection; residual; layer_norm; fc 4d gelu, fc d;
residual), final layer_norm, fc to the vocabulary, softmax cross entropy, Adam (lr 1e-3).

Per configuration: XLA's memory analysis of the compiled step (``fj.compiled_memory``:
temporaries and peak, bytes the step holds at once; JAX's CPU client reports no run-time memory
statistics), and the step time, median and spread (min-max) of ``--repeats`` steps taken in turns
with the other configurations (interleaved, so a busy machine slows all alike). Gradient merge is
timed per run (a micro-batch of batch/k) and per update (k runs: the work of one full-batch step).

    python benchmarks/big_model.py [--layers 12 --width 768 --heads 12 --seq 128 --batch 8]
                                   [--vocab 8192 --merge 4 --repeats 5] [--configs base,recompute,...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

LR, BETA1, BETA2, EPS = 1e-3, 0.9, 0.999, 1e-8


# -- fluidjax -------------------------------------------------------------------------------------------
def build_fluidjax(cfg, recompute: bool = False, merge: int = 1, amp: bool = False):
    """``(main, startup, loss, parameter names in creation order)``."""
    import fluidjax as fj
    from fluidjax import layer

    d, h, t = cfg.width, cfg.heads, cfg.seq
    dh = d // h
    main, startup = fj.Program(), fj.Program()
    main.random_seed = startup.random_seed = 1
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        tokens = layer.data("tokens", shape=[t, 1], dtype="int64")
        positions = layer.data("positions", shape=[t, 1], dtype="int64")
        labels = layer.data("labels", shape=[t, 1], dtype="int64")
        mask = fj.data("mask", shape=[t, t], dtype="float32")
        x = layer.elementwise_add(layer.embedding(tokens, size=[cfg.vocab, d]),
                                  layer.embedding(positions, size=[t, d]))

        def fc(v, size, act=None):
            return layer.fc(v, size, num_flatten_dims=2, activation=act)

        def heads(v):
            return layer.transpose(layer.reshape(v, [0, t, h, dh]), [0, 2, 1, 3])

        checkpoints = []
        for _ in range(cfg.layers):
            a = layer.layer_norm(x, begin_norm_axis=2)
            q, k, v = heads(fc(a, d)), heads(fc(a, d)), heads(fc(a, d))
            s = layer.elementwise_add(layer.matmul(q, k, transpose_y=True, alpha=dh ** -0.5), mask, axis=-1)
            o = layer.matmul(layer.softmax(s), v)
            x = layer.elementwise_add(x, fc(layer.reshape(layer.transpose(o, [0, 2, 1, 3]), [0, t, d]), d))
            m = layer.layer_norm(x, begin_norm_axis=2)
            x = layer.elementwise_add(x, fc(fc(m, 4 * d, "gelu"), d))
            checkpoints.append(x)
        logits = fc(layer.layer_norm(x, begin_norm_axis=2), cfg.vocab)
        loss = layer.mean(layer.softmax_with_cross_entropy(logits, labels))
        opt = fj.optimizer.Adam(LR, BETA1, BETA2, EPS)
        if amp:       # innermost, as fleet orders its meta-optimizers: amp, recompute, gradient merge
            opt = fj.amp.decorate(opt, level="O1", dtype="bfloat16", use_dynamic_loss_scaling=False,
                                  init_loss_scaling=1.0)
        if recompute:
            opt = fj.optimizer.RecomputeOptimizer(opt)
            opt._set_checkpoints(checkpoints)
        if merge > 1:
            opt = fj.optimizer.GradientMergeOptimizer(opt, k_steps=merge)
        opt.minimize(loss)
    return main, startup, loss, [p.name for p in main.all_parameters()]


def batches(cfg, batch: int, count: int, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    t = cfg.seq
    mask = np.triu(np.full((t, t), -1e9, np.float32), 1)
    positions = np.broadcast_to(np.arange(t, dtype=np.int64)[None, :, None], (batch, t, 1)).copy()
    out = []
    for _ in range(count):
        tokens = rng.integers(0, cfg.vocab, (batch, t + 1, 1)).astype(np.int64)
        out.append({"tokens": tokens[:, :-1], "positions": positions, "labels": tokens[:, 1:], "mask": mask})
    return out


def fluidjax_runner(cfg, recompute=False, merge=1, amp=False):
    """(step(feed) -> loss, figures of the compiled step, initial parameters by name, first feeds)."""
    import fluidjax as fj

    main, startup, loss, names = build_fluidjax(cfg, recompute, merge, amp)
    exe, scope = fj.Executor(), fj.Scope()
    exe.run(startup, scope=scope)
    params = {n: np.array(scope.find_var(n).get_tensor(), copy=True) for n in names}   # not a view: steps donate
    feeds = batches(cfg, cfg.batch // merge, 4 * merge)
    figures = fj.compiled_memory(main, feeds[0], scope=scope, fetch_list=[loss])

    def step(feed):
        return exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0]
    return step, figures, params, feeds


# -- hand-written JAX ---------------------------------------------------------------------------------
def jax_runner(cfg, params: dict, names: list[str], remat: bool = False, bf16: bool = False):
    """The same model and Adam written in JAX, from fluidjax's initial values (``names``: the
    parameters in creation order — embeddings, then per block layer_norm, q, k, v, projection,
    layer_norm, two fc, each weight then bias; the final layer_norm and fc). ``bf16``: the matrix
    products (fc and both attention products) take bfloat16 inputs and give float32, as AMP O1's
    white list does; everything else stays float32."""
    import jax
    import jax.numpy as jnp

    d, h, t = cfg.width, cfg.heads, cfg.seq
    dh = d // h
    it = iter(names)
    tok, pos = next(it), next(it)
    blocks = []
    for _ in range(cfg.layers):
        ln1 = (next(it), next(it))
        qkv = [(next(it), next(it)) for _ in range(3)]
        proj = (next(it), next(it))
        ln2 = (next(it), next(it))
        ff1, ff2 = (next(it), next(it)), (next(it), next(it))
        blocks.append((ln1, qkv, proj, ln2, ff1, ff2))
    ln_f, head = (next(it), next(it)), (next(it), next(it))

    def layer_norm(p, x, pair):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / jnp.sqrt(var + 1e-5) * p[pair[0]] + p[pair[1]]

    def mm(a, b):
        if bf16:
            return jnp.matmul(a.astype(jnp.bfloat16), b.astype(jnp.bfloat16)).astype(jnp.float32)
        return a @ b

    def fc(p, x, pair):
        return mm(x, p[pair[0]]) + p[pair[1]]

    def block(p, x, mask, spec):
        ln1, qkv, proj, ln2, ff1, ff2 = spec
        a = layer_norm(p, x, ln1)
        q, k, v = (fc(p, a, pair).reshape(-1, t, h, dh).transpose(0, 2, 1, 3) for pair in qkv)
        s = mm(q, k.transpose(0, 1, 3, 2)) * dh ** -0.5 + mask
        o = mm(jax.nn.softmax(s, axis=-1), v).transpose(0, 2, 1, 3).reshape(-1, t, d)
        x = x + fc(p, o, proj)
        m = layer_norm(p, x, ln2)
        return x + fc(p, jax.nn.gelu(fc(p, m, ff1), approximate=False), ff2)

    def loss_fn(p, tokens, positions, labels, mask):
        x = p[tok][tokens[..., 0]] + p[pos][positions[..., 0]]
        for spec in blocks:
            f = (lambda p, x, spec=spec: block(p, x, mask, spec))
            x = (jax.checkpoint(f) if remat else f)(p, x)
        logits = fc(p, layer_norm(p, x, ln_f), head)
        logp = jax.nn.log_softmax(logits, axis=-1)
        return -jnp.mean(jnp.take_along_axis(logp, labels, axis=-1))

    state = {"params": {k: jnp.asarray(v) for k, v in params.items()},
             "m1": {k: jnp.zeros(v.shape, jnp.float32) for k, v in params.items()},
             "m2": {k: jnp.zeros(v.shape, jnp.float32) for k, v in params.items()},
             "pows": jnp.asarray([BETA1, BETA2], jnp.float32)}

    def step_fn(state, tokens, positions, labels, mask):
        loss, grads = jax.value_and_grad(loss_fn)(state["params"], tokens, positions, labels, mask)
        b1p, b2p = state["pows"][0], state["pows"][1]
        lr_t = (LR * jnp.sqrt(1 - b2p) / (1 - b1p)).astype(jnp.float32)
        m1 = jax.tree.map(lambda m, g: BETA1 * m + (1 - BETA1) * g, state["m1"], grads)
        m2 = jax.tree.map(lambda m, g: BETA2 * m + (1 - BETA2) * g * g, state["m2"], grads)
        new = jax.tree.map(lambda p, a, b: p - lr_t * (a / (jnp.sqrt(b) + EPS * jnp.sqrt(1 - b2p))),
                           state["params"], m1, m2)
        return {"params": new, "m1": m1, "m2": m2, "pows": state["pows"] * jnp.asarray([BETA1, BETA2], jnp.float32)}, loss

    jitted = jax.jit(step_fn, donate_argnums=(0,))
    feeds = batches(cfg, cfg.batch, 4)
    args = lambda f: (f["tokens"], f["positions"], f["labels"], f["mask"])  # noqa: E731
    m = jitted.lower(state, *args(feeds[0])).compile().memory_analysis()
    figures = {"temp_bytes": int(m.temp_size_in_bytes), "argument_bytes": int(m.argument_size_in_bytes),
               "output_bytes": int(m.output_size_in_bytes), "alias_bytes": int(m.alias_size_in_bytes)}
    figures["peak_bytes"] = (figures["argument_bytes"] + figures["output_bytes"] - figures["alias_bytes"]
                             + figures["temp_bytes"])

    def step(feed):
        nonlocal state
        state, loss = jitted(state, *args(feed))
        return np.asarray(loss)
    return step, figures, feeds


# -- the measurement ----------------------------------------------------------------------------------
CONFIGS = {
    # name: (recompute, merge, amp)
    "base": (False, 1, False),
    "recompute": (True, 1, False),
    "merge": (False, None, False),
    "recompute+merge": (True, None, False),
    "amp_bf16": (False, 1, True),
    "recompute+merge+amp": (True, None, True),
}
JAX_CONFIGS = {"jax": {}, "jax_remat": {"remat": True}, "jax_bf16": {"bf16": True}}


def model_flops(cfg) -> float:
    """Matrix-product FLOPs of one training update (forward + backward = 3x forward), the usual
    model-FLOPs count: per token 2 x (12 d^2 per block + d x vocab) for the weights, and
    2 x 2 x seq x d per block for the two attention products (the causal half not discounted)."""
    d, t, layers = cfg.width, cfg.seq, cfg.layers
    per_token = 2 * (layers * 12 * d * d + d * cfg.vocab) + 2 * 2 * layers * t * d
    return 3.0 * per_token * cfg.batch * t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--width", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--merge", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--configs", default=",".join(CONFIGS) + ",jax,jax_remat,jax_bf16",
                        help="comma-separated; a fluidjax configuration + '_unpacked': FLAGS_pack_small_state off")
    parser.add_argument("--json", default=None, help="also write the results here")
    parser.add_argument("--peak-tflops", type=float, default=None,
                        help="the device's peak (dense bf16) TFLOP/s: adds model FLOPs utilization (MFU)")
    cfg = parser.parse_args()
    import fluidjax as fj

    wanted = cfg.configs.split(",")
    if not hasattr(fj, "amp"):
        dropped = [c for c in wanted if CONFIGS.get(c, (0, 0, False))[2]]
        wanted = [c for c in wanted if c not in dropped]
        if dropped:
            print(f"fj.amp is not available: {', '.join(dropped)} left out")
    print(f"GPT-style decoder: {cfg.layers} layers, width {cfg.width}, {cfg.heads} heads, sequence {cfg.seq}, "
          f"batch {cfg.batch}, vocabulary {cfg.vocab}; gradient merge k={cfg.merge} (micro-batch "
          f"{cfg.batch // cfg.merge}); Adam")
    runners, figures, runs_per_update, losses = {}, {}, {}, {}
    params = names = None
    for name in wanted:
        start = time.perf_counter()
        if name in JAX_CONFIGS:
            if params is None:
                _, _, params, _ = fluidjax_runner(cfg)
                names = list(params)
            step, figs, feeds = jax_runner(cfg, params, names, **JAX_CONFIGS[name])
            merge = 1
        else:
            # "<config>_unpacked": the step made with FLAGS_pack_small_state off (its one-element
            # state, Adam's beta powers, one argument each: lowering/packed_state.py)
            unpacked = name.endswith("_unpacked")
            recompute, merge, amp = CONFIGS[name[:-len("_unpacked")] if unpacked else name]
            merge = merge or cfg.merge
            fj.set_flags({"FLAGS_pack_small_state": not unpacked})    # read when its plans are made
            step, figs, p, feeds = fluidjax_runner(cfg, recompute, merge, amp)
            params = params or p
            names = names or list(p)
        losses[name] = float(step(feeds[0]))          # compiles (and is the warm-up's first step)
        fj.set_flags({"FLAGS_pack_small_state": True})
        runners[name] = (step, feeds)
        figures[name] = figs
        runs_per_update[name] = merge
        print(f"  {name}: built and compiled in {time.perf_counter() - start:.1f} s; first loss {losses[name]:.4f}",
              flush=True)

    times: dict[str, list[float]] = {n: [] for n in runners}
    order = list(runners)
    for i in range(cfg.warmup + cfg.repeats):
        for name in order[i % len(order):] + order[:i % len(order)]:
            step, feeds = runners[name]
            k = runs_per_update[name]
            start = time.perf_counter()
            for j in range(k):                        # one update: k runs of a micro-batch
                step(feeds[(i * k + j) % len(feeds)])
            if i >= cfg.warmup:
                times[name].append(time.perf_counter() - start)

    base = figures.get("base")
    flops = model_flops(cfg)
    import jax
    print(f"\ndevice: {jax.devices()[0].device_kind}; model FLOPs per update {flops / 1e12:.3f} T"
          + (f"; MFU against a peak of {cfg.peak_tflops:g} TFLOP/s" if cfg.peak_tflops else ""))
    print(f"\n{'configuration':<22} {'temp MiB':>9} {'peak MiB':>9} {'peak/base':>9} "
          f"{'ms/update (median, min-max)':>30} {'ms/run':>8} {'TFLOP/s':>8} {'MFU':>6}")
    results = {}
    for name in runners:
        f, t = figures[name], times[name]
        med = statistics.median(t) * 1e3
        k = runs_per_update[name]
        rel = f"{f['peak_bytes'] / base['peak_bytes']:.2f}" if base else "-"
        spread = f"{min(t) * 1e3:.1f}-{max(t) * 1e3:.1f}"
        rate = flops / (med / 1e3) / 1e12
        mfu = f"{rate / cfg.peak_tflops:.1%}" if cfg.peak_tflops else "-"
        print(f"{name:<22} {f['temp_bytes'] / 2**20:>9.1f} {f['peak_bytes'] / 2**20:>9.1f} {rel:>9} "
              f"{med:>14.1f} ({spread:>13}) {med / k:>8.1f} {rate:>8.3g} {mfu:>6}")
        results[name] = {"temp_bytes": f["temp_bytes"], "peak_bytes": f["peak_bytes"], "ms_per_update": med,
                         "ms_min": min(t) * 1e3, "ms_max": max(t) * 1e3, "runs_per_update": k,
                         "first_loss": losses[name], "tflops": rate}
    if cfg.json:
        with open(cfg.json, "w") as f:
            json.dump({"config": vars(cfg), "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
