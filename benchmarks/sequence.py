"""A training step of the Fluid book's sentiment models on variable-length batches.

The convolutional model (embedding -> two ``sequence_conv_pool`` -> fc softmax) and the stacked
LSTM model (embedding -> fc -> 3 ``dynamic_lstm`` of alternating direction -> max pool -> fc
softmax), batch 64, sentence lengths uniform in 10..200, Adam. The same batches and the same
initial parameters on every side:

- fluidjax: LoD feeds (``fj.create_lod_tensor``), the program's compiled step;
- hand-written JAX: the same math on padded ``[batch, T]`` id matrices with masks, ``T`` padded
  to the next power of two of the batch's longest sentence (what a careful JAX user does so as
  not to recompile every batch), ``lax.scan`` for the LSTM, Adam as in ``sides.py``;
- Paddle 2.6.2's static Executor running the same forward program (parsed from fluidjax's bytes)
  with Paddle's own backward and Adam, fed LoD tensors.

The first losses of the three sides are checked to agree before anything is timed. Also
printed: how many times fluidjax compiles over a 100-batch epoch of random lengths.

    python benchmarks/sequence.py [--steps N] [--models conv,lstm]

``--alone`` (one command printing the ratios of issue 30): the stacked-LSTM model only, SGD by
default, batches 32 and 64; fluidjax and Paddle each alone in its own process (the machine's
cores to itself), the processes alternating round by round; also fluidjax at equal lengths with
the same number of tokens (the ragged step's cost against the same work unragged). Prints each
configuration's median over rounds with the spread of the rounds, Paddle/fluidjax and
fluidjax ragged/fixed:

    python benchmarks/sequence.py --alone [--batches 32,64] [--rounds 3] [--steps 10] [--optimizer sgd] [--before]
        [--row-buckets 1,8] [--no-fixed] [--no-paddle]

``--row-buckets 1,8``: one fluidjax ragged side per ``FLAGS_lod_row_buckets`` value (the rows of a
LoD feed padded to a power of two, or to eighths of an octave), their ratio printed too. Every
side runs each of its batches once before timing (a finer row bucket compiles per bucket).
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # benchmarks.book_models

from sides import BETA1, BETA2, EPS, LR, adam_trainer  # noqa: E402
from timing import compare  # noqa: E402

BATCH, LOW, HIGH = 64, 10, 200
# LSTM_HID 500 (width 125): at widths that are multiples of 8 Paddle 2.6.2's float32 AVX lstm_grad
# drops the hidden state's gradient into the cell, and its losses part from the other two sides.
DICT, EMB, CONV_HID, LSTM_HID, CLASSES = 5000, 128, 128, 500, 2


def make_batches(count: int, seed: int = 0):
    from benchmarks import book_models as bm

    return list(bm.sentiment_batches(count, BATCH, dict_dim=DICT, low=LOW, high=HIGH, seed=seed))


def build(model: str):
    import fluidjax as fj
    from benchmarks import book_models as bm

    main, startup = fj.Program(), fj.Program()
    startup.random_seed = 5
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        if model == "conv":
            m = bm.understand_sentiment_conv(dict_dim=DICT, emb_dim=EMB, hid_dim=CONV_HID, class_dim=CLASSES)
        else:
            m = bm.understand_sentiment_lstm(dict_dim=DICT, emb_dim=EMB, hid_dim=LSTM_HID, class_dim=CLASSES)
    forward = main.serialize()
    with fj.program_guard(main, startup):
        fj.optimizer.Adam(learning_rate=LR, beta1=BETA1, beta2=BETA2, epsilon=EPS).minimize(m.loss)
    return main, startup, m, forward


# -- fluidjax ------------------------------------------------------------------------------------
def fluidjax_side(model: str):
    import fluidjax as fj

    main, startup, m, forward = build(model)
    exe, scope = fj.Executor(), fj.Scope()
    exe.run(startup, scope=scope)
    params = [(p.name, np.asarray(scope.find_var(p.name).get_tensor()).copy())
              for p in main.global_block().all_parameters()]

    def step(ids, lengths, labels):
        feed = {"words": fj.create_lod_tensor(ids, [lengths]), "label": labels}
        return exe.run(main, feed=feed, fetch_list=[m.loss], scope=scope)[0]

    return step, params, m, forward, exe


# -- Paddle ----------------------------------------------------------------------------------------
def paddle_side(forward: bytes, loss_name: str, params):
    os.environ.setdefault("GLOG_minloglevel", "2")
    import paddle

    paddle.enable_static()
    main = paddle.static.Program.parse_from_string(forward)
    startup = paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        paddle.optimizer.Adam(learning_rate=LR, beta1=BETA1, beta2=BETA2, epsilon=EPS).minimize(
            main.global_block().var(loss_name))
    scope, place = paddle.static.Scope(), paddle.CPUPlace()
    exe = paddle.static.Executor(place)
    with paddle.static.scope_guard(scope):
        exe.run(startup)
        for name, value in params:
            scope.var(name).get_tensor().set(value, place)

    def step(ids, lengths, labels):
        with paddle.static.scope_guard(scope):
            words = paddle.base.create_lod_tensor(ids, [lengths], place)
            return exe.run(main, feed={"words": words, "label": labels}, fetch_list=[loss_name])[0]

    return step


# -- hand-written JAX ------------------------------------------------------------------------------
def padded(ids: np.ndarray, lengths: list[int]):
    """[batch, T] ids (T: next power of two of the longest) and the float mask."""
    t = 1 << (max(lengths) - 1).bit_length()
    out = np.zeros((len(lengths), t), np.int32)
    mask = np.zeros((len(lengths), t), np.float32)
    start = 0
    for i, n in enumerate(lengths):
        out[i, :n] = ids[start:start + n, 0]
        mask[i, :n] = 1
        start += n
    return out, mask


def _shift(x, k):
    """x[:, t + k] at position t (zeros outside), for x [batch, T, ...]."""
    import jax.numpy as jnp

    if k == 0:
        return x
    pad = jnp.zeros_like(x[:, :abs(k)])
    return jnp.concatenate([x[:, k:], pad], 1) if k > 0 else jnp.concatenate([pad, x[:, :k]], 1)


def _loss(prob, labels):
    import jax.numpy as jnp

    return -jnp.mean(jnp.log(jnp.take_along_axis(prob, labels, axis=1)))


def jax_conv_loss(p, x, labels):
    import jax
    import jax.numpy as jnp

    ids, mask = x
    emb = p["emb"][ids] * mask[..., None]
    length = mask.sum(1, keepdims=True)
    pooled = []
    for k in (3, 4):
        start = -(k // 2)
        window = jnp.concatenate([_shift(emb, start + j) for j in range(k)], -1)
        h = jnp.tanh(window @ p[f"conv{k}.w"] + p[f"conv{k}.b"]) * mask[..., None]
        pooled.append(h.sum(1) / jnp.sqrt(jnp.maximum(length, 1)))
    logits = pooled[0] @ p["out.w0"] + pooled[1] @ p["out.w1"] + p["out.b"]
    return _loss(jax.nn.softmax(logits), labels)


def _reverse_within(x, lengths):
    """Each row's first ``lengths[i]`` steps in reverse order (the rest left in place)."""
    import jax.numpy as jnp

    t = jnp.arange(x.shape[1])
    src = jnp.where(t[None] < lengths[:, None], lengths[:, None] - 1 - t[None], t[None])
    return jnp.take_along_axis(x, src[..., None], axis=1)


def _lstm(gates_in, mask, w, b, reverse):
    """Paddle's lstm op with peepholes: gate blocks [candidate, input, forget, output]."""
    import jax
    import jax.numpy as jnp

    d = w.shape[0]
    lengths = mask.sum(1).astype(jnp.int32)
    if reverse:
        gates_in = _reverse_within(gates_in, lengths)
    bias, w_ic, w_fc, w_oc = b[0, :4 * d], b[0, 4 * d:5 * d], b[0, 5 * d:6 * d], b[0, 6 * d:]
    xs = jnp.swapaxes(gates_in + bias, 0, 1)
    ms = jnp.swapaxes(mask, 0, 1)[..., None]

    def cell(carry, inputs):
        h, c = carry
        g, m = inputs
        g = g + h @ w
        cand, i, f, o = jnp.split(g, 4, axis=-1)
        i = jax.nn.sigmoid(i + c * w_ic)
        f = jax.nn.sigmoid(f + c * w_fc)
        c_new = f * c + i * jnp.tanh(cand)
        o = jax.nn.sigmoid(o + c_new * w_oc)
        h_new = o * jnp.tanh(c_new)
        h, c = m * h_new + (1 - m) * h, m * c_new + (1 - m) * c
        return (h, c), h * m

    zeros = jnp.zeros((gates_in.shape[0], d), gates_in.dtype)
    _, hs = jax.lax.scan(cell, (zeros, zeros), (xs, ms))
    hs = jnp.swapaxes(hs, 0, 1)
    return _reverse_within(hs, lengths) if reverse else hs


def jax_lstm_loss(p, x, labels):
    import jax
    import jax.numpy as jnp

    ids, mask = x
    m3 = mask[..., None]
    emb = p["emb"][ids]
    fc = emb @ p["fc0.w0"] + p["fc0.b"]
    lstm = _lstm(fc, mask, p["lstm0.w"], p["lstm0.b"], False)
    for i in (1, 2):
        fc = fc @ p[f"fc{i}.w0"] + lstm @ p[f"fc{i}.w1"] + p[f"fc{i}.b"]
        lstm = _lstm(fc, mask, p[f"lstm{i}.w"], p[f"lstm{i}.b"], reverse=(i + 1) % 2 == 0)
    neg = jnp.finfo(fc.dtype).min
    fc_last = jnp.where(m3 > 0, fc, neg).max(1)
    lstm_last = jnp.where(m3 > 0, lstm, neg).max(1)
    logits = fc_last @ p["out.w0"] + lstm_last @ p["out.w1"] + p["out.b"]
    return _loss(jax.nn.softmax(logits), labels)


CONV_NAMES = ["emb", "conv3.w", "conv3.b", "conv4.w", "conv4.b", "out.w0", "out.w1", "out.b"]
LSTM_NAMES = ["emb", "fc0.w0", "fc0.b", "lstm0.w", "lstm0.b",
              "fc1.w0", "fc1.w1", "fc1.b", "lstm1.w", "lstm1.b",
              "fc2.w0", "fc2.w1", "fc2.b", "lstm2.w", "lstm2.b", "out.w0", "out.w1", "out.b"]


def jax_side(model: str, params):
    """``params``: fluidjax's (name, value) in creation order, renamed to the roles above."""
    names = CONV_NAMES if model == "conv" else LSTM_NAMES
    assert len(names) == len(params), ([n for n, _ in params], names)
    values = {role: value for role, (_, value) in zip(names, params)}
    train = adam_trainer(jax_conv_loss if model == "conv" else jax_lstm_loss, values)

    def step(ids, lengths, labels):
        return train(padded(ids, lengths), labels)

    return step


def compile_count(model: str, batches) -> int:
    import fluidjax as fj

    main, startup, m, _ = build(model)
    exe, scope = fj.Executor(), fj.Scope()
    exe.run(startup, scope=scope)
    before = exe.trace_count
    for ids, lengths, labels in batches:
        exe.run(main, feed={"words": fj.create_lod_tensor(ids, [lengths]), "label": labels},
                fetch_list=[m.loss], scope=scope)
    return exe.trace_count - before


# -- each side alone in its own process (--alone) --------------------------------------------------
def _equal_lengths(lengths: list[int]) -> list[int]:
    """As many sequences and tokens as ``lengths``, the lengths equal (differing by at most one)."""
    total, n = sum(lengths), len(lengths)
    return [total // n + (i < total % n) for i in range(n)]


def _alone_batches(batch: int, shape: str, count: int = 8):
    out = []
    for ids, lengths, labels in bm_batches(count, batch):
        if shape == "fixed":
            lengths = _equal_lengths(lengths)
        out.append((ids, lengths, labels))
    return out


def bm_batches(count: int, batch: int, seed: int = 1):
    from benchmarks import book_models as bm

    return list(bm.sentiment_batches(count, batch, dict_dim=DICT, low=LOW, high=HIGH, seed=seed))


def _build_lstm(optimizer: str):
    """The stacked-LSTM program with ``optimizer`` (sgd or adam): (main, startup, model, forward bytes)."""
    import fluidjax as fj
    from benchmarks import book_models as bm

    main, startup = fj.Program(), fj.Program()
    startup.random_seed = 5
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        m = bm.understand_sentiment_lstm(dict_dim=DICT, emb_dim=EMB, hid_dim=LSTM_HID, class_dim=CLASSES)
    forward = main.serialize()
    with fj.program_guard(main, startup):
        if optimizer == "sgd":
            fj.optimizer.SGD(learning_rate=LR).minimize(m.loss)
        else:
            fj.optimizer.Adam(learning_rate=LR, beta1=BETA1, beta2=BETA2, epsilon=EPS).minimize(m.loss)
    return main, startup, m, forward


def _child(side: str, batch: int, shape: str, steps: int, optimizer: str, workdir: str, row_buckets: int = 1) -> None:
    """One side, alone in this process: prints 'LOSSES l1 l2', 'MS median' and 'CPU median' (process
    CPU time per step, ms); fluidjax with ``FLAGS_lod_row_buckets`` = ``row_buckets``."""
    import statistics
    import time

    data = _alone_batches(batch, shape)
    if side.startswith("fluidjax"):
        import fluidjax as fj
        from fluidjax.lowering.ops import recurrent_lod

        recurrent_lod.RAGGED = side != "fluidjax-padded"     # the padded loop the ragged one replaced
        fj.set_flags({"FLAGS_lod_row_buckets": row_buckets})

        main, startup, m, _ = _build_lstm(optimizer)
        exe, scope = fj.Executor(), fj.Scope()
        exe.run(startup, scope=scope)
        with np.load(os.path.join(workdir, "params.npz")) as f:
            for name in f.files:
                scope.find_var(name).get_tensor().set(f[name], fj.CPUPlace())

        def step(ids, lengths, labels):
            feed = {"words": fj.create_lod_tensor(ids, [lengths]), "label": labels}
            return exe.run(main, feed=feed, fetch_list=[m.loss], scope=scope)[0]
    else:
        os.environ.setdefault("GLOG_minloglevel", "2")
        import paddle

        paddle.enable_static()
        with open(os.path.join(workdir, "forward.pb"), "rb") as f:
            prog = paddle.static.Program.parse_from_string(f.read())
        with open(os.path.join(workdir, "loss.txt")) as f:
            loss_name = f.read().strip()
        startup = paddle.static.Program()
        with paddle.static.program_guard(prog, startup):
            opt = paddle.optimizer.SGD(learning_rate=LR) if optimizer == "sgd" else \
                paddle.optimizer.Adam(learning_rate=LR, beta1=BETA1, beta2=BETA2, epsilon=EPS)
            opt.minimize(prog.global_block().var(loss_name))
        scope, place = paddle.static.Scope(), paddle.CPUPlace()
        exe = paddle.static.Executor(place)
        with paddle.static.scope_guard(scope), np.load(os.path.join(workdir, "params.npz")) as f:
            exe.run(startup)
            for name in f.files:
                scope.var(name).get_tensor().set(f[name], place)

        def step(ids, lengths, labels):
            with paddle.static.scope_guard(scope):
                words = paddle.base.create_lod_tensor(ids, [lengths], place)
                return exe.run(prog, feed={"words": words, "label": labels}, fetch_list=[loss_name])[0]
    losses = [float(np.asarray(step(*b)).reshape(-1)[0]) for b in data[:2]]
    print("LOSSES", *losses, flush=True)
    for b in data[2:]:                 # every batch once: finer row buckets compile per bucket
        step(*b)
    times, cpu = [], []
    for i in range(steps):
        start, start_cpu = time.perf_counter(), time.process_time()
        np.asarray(step(*data[i % len(data)]))
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    print("MS", statistics.median(times) * 1e3, flush=True)
    print("CPU", statistics.median(cpu) * 1e3, flush=True)


def alone(batches: list[int], rounds: int, steps: int, optimizer: str, before: bool = False,
          row_buckets: tuple[int, ...] = (1,), fixed: bool = True, paddle: bool = True) -> None:
    """Every (side, batch, lengths) alone in its own process, the sides alternating round by round;
    prints the per-round medians (wall and process CPU time), their spread, and the ratios
    Paddle/fluidjax (ragged) and fluidjax ragged / fluidjax fixed (equal lengths, the same tokens);
    with ``before`` also fluidjax with the padded loop (``recurrent_lod.RAGGED = False``) on the
    ragged batches; one fluidjax ragged side per ``row_buckets`` value (``FLAGS_lod_row_buckets``),
    the ratios against each."""
    import subprocess
    import tempfile

    import fluidjax as fj

    main, startup, m, forward = _build_lstm(optimizer)
    exe, scope = fj.Executor(), fj.Scope()
    exe.run(startup, scope=scope)
    params = {p.name: np.asarray(scope.find_var(p.name).get_tensor()).copy()
              for p in main.global_block().all_parameters()}
    print(f"stacked-LSTM classifier (hidden {LSTM_HID // 4}, 3 layers), {optimizer.upper()} step, lengths uniform "
          f"{LOW}..{HIGH}; each side alone in its own process, {rounds} alternating rounds of {steps} steps")
    with tempfile.TemporaryDirectory() as workdir:
        np.savez(os.path.join(workdir, "params.npz"), **params)
        with open(os.path.join(workdir, "forward.pb"), "wb") as f:
            f.write(forward)
        with open(os.path.join(workdir, "loss.txt"), "w") as f:
            f.write(m.loss.name)
        runs = [("paddle", "ragged", 1)] if paddle else []
        runs += [("fluidjax", "ragged", k) for k in row_buckets]
        if fixed:
            runs.append(("fluidjax", "fixed", row_buckets[0]))
        if before:
            runs.append(("fluidjax-padded", "ragged", 1))
        for batch in batches:
            ms = {r: [] for r in runs}
            cpu = {r: [] for r in runs}
            losses = {}
            for k in range(rounds):
                order = runs[k % len(runs):] + runs[:k % len(runs)]
                for side, shape, rb in order:
                    cmd = [sys.executable, os.path.abspath(__file__), "--child", side, "--batch", str(batch),
                           "--shape", shape, "--steps", str(steps), "--optimizer", optimizer, "--workdir", workdir,
                           "--row-buckets", str(rb)]
                    out = subprocess.run(cmd, capture_output=True, text=True)
                    if out.returncode:
                        raise RuntimeError(f"{side} {shape} failed:\n{out.stderr[-3000:]}")
                    for line in out.stdout.splitlines():
                        if line.startswith("LOSSES"):
                            losses[(side, shape, rb)] = [float(v) for v in line.split()[1:]]
                        if line.startswith("MS"):
                            ms[(side, shape, rb)].append(float(line.split()[1]))
                        if line.startswith("CPU"):
                            cpu[(side, shape, rb)].append(float(line.split()[1]))
            ragged = [r for r in runs if r[0] == "fluidjax" and r[1] == "ragged"]
            for r in ragged[1:]:
                np.testing.assert_allclose(losses[r], losses[ragged[0]], rtol=1e-6)
            if paddle:
                np.testing.assert_allclose(losses[ragged[0]], losses[runs[0]], rtol=1e-4)
            for r in runs:
                print(f"batch {batch} {r[0]:>8} {r[1]:>6} rows/oct {r[2]}: wall {np.median(ms[r]):7.1f} ms "
                      f"({min(ms[r]):.1f}..{max(ms[r]):.1f}), cpu {np.median(cpu[r]):7.1f} ms "
                      f"({min(cpu[r]):.1f}..{max(cpu[r]):.1f})  first losses {losses[r]}")

            def ratio(num, den, what):
                for name, t in (("wall", ms), ("cpu", cpu)):
                    per = [a / b for a, b in zip(t[num], t[den])]
                    print(f"batch {batch}: {what} {name} {np.median(t[num]) / np.median(t[den]):.2f} "
                          f"(rounds {min(per):.2f}..{max(per):.2f})")
            for r in ragged:
                if paddle:
                    ratio(runs[0], r, f"Paddle/fluidjax (ragged, rows/oct {r[2]})")
                if r is not ragged[0]:
                    ratio(ragged[0], r, f"fluidjax rows/oct {ragged[0][2]} / rows/oct {r[2]}")
            if fixed:
                ratio(ragged[0], ("fluidjax", "fixed", row_buckets[0]), "fluidjax ragged/fixed")
            if before:
                ratio(runs[-1], ragged[0], "fluidjax padded loop / ragged")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--models", default="conv,lstm")
    parser.add_argument("--epoch", type=int, default=100, help="batches in the compile-count epoch (0: skip)")
    parser.add_argument("--alone", action="store_true",
                        help="stacked LSTM only: every side alone in its own process, alternating (see alone())")
    parser.add_argument("--batches", default="32,64", help="--alone: batch sizes")
    parser.add_argument("--rounds", type=int, default=3, help="--alone: alternating rounds")
    parser.add_argument("--optimizer", default="sgd", choices=["sgd", "adam"], help="--alone: the optimizer")
    parser.add_argument("--before", action="store_true", help="--alone: also fluidjax with the padded loop")
    parser.add_argument("--row-buckets", default="1",
                        help="--alone: FLAGS_lod_row_buckets values, one fluidjax ragged side each (e.g. 1,8)")
    parser.add_argument("--no-fixed", action="store_true", help="--alone: skip fluidjax at equal lengths")
    parser.add_argument("--no-paddle", action="store_true", help="--alone: skip Paddle")
    parser.add_argument("--child", choices=["fluidjax", "fluidjax-padded", "paddle"], help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, default=BATCH, help=argparse.SUPPRESS)
    parser.add_argument("--shape", default="ragged", choices=["ragged", "fixed"], help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child, args.batch, args.shape, args.steps, args.optimizer, args.workdir,
               int(args.row_buckets))
        return
    if args.alone:
        alone([int(b) for b in args.batches.split(",")], args.rounds, args.steps, args.optimizer, args.before,
              tuple(int(k) for k in args.row_buckets.split(",")), not args.no_fixed, not args.no_paddle)
        return
    import jax

    print(f"device: {jax.devices()[0]}; batch {BATCH}, lengths uniform in {LOW}..{HIGH}, Adam")
    data = make_batches(8, seed=1)
    for model in args.models.split(","):
        fj_step, params, m, forward, _ = fluidjax_side(model)
        runners = {"fluidjax": fj_step, "jax": jax_side(model, params), "paddle": paddle_side(forward, m.loss.name, params)}
        first = {k: [float(np.asarray(r(*b))) for b in data[:2]] for k, r in runners.items()}
        print(f"{model}: first losses {first}")
        np.testing.assert_allclose(first["fluidjax"], first["jax"], rtol=2e-3)
        np.testing.assert_allclose(first["fluidjax"], first["paddle"], rtol=2e-3)
        ms = compare(runners, data, args.steps, warmup=3)
        print(f"{model}: fluidjax {ms['fluidjax']:.1f} ms, hand-written JAX {ms['jax']:.1f} ms, Paddle {ms['paddle']:.1f} ms;"
              f" fluidjax/JAX {ms['fluidjax/jax']:.2f}, Paddle/fluidjax {ms['paddle/fluidjax']:.2f}")
        if args.epoch:
            epoch = make_batches(args.epoch, seed=2)
            longest = max(sum(lengths) for _, lengths, _ in epoch)
            bound = int(np.ceil(np.log2(longest))) + 1
            print(f"{model}: {compile_count(model, epoch)} compilations over a {args.epoch}-batch epoch "
                  f"(bound ceil(log2({longest})) + 1 = {bound})")


if __name__ == "__main__":
    main()
