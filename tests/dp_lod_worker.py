"""Data-parallel training with LoD feeds on several devices, in a process of its own.

``tests/test_data_parallel_lod.py`` starts this script with 8 forced host devices and reads the
JSON it prints on its last line; the test makes the assertions, this only measures. Per model
(the book's stacked-LSTM sentiment net, a DynamicRNN classifier, a CRF tagger), Momentum steps:

- ``even``: batches of 16 sequences (2 per device): final parameters of the 8-device run and of
  one device on the same batches;
- ``uneven``: batches of 15 sequences (Paddle's rule: 2 each, the last device 1): the 8-device run
  against an emulation on one device — each share run alone from the step's starting state and
  the resulting states averaged (exact for Momentum, whose update is linear in the gradient:
  Paddle's CoeffNumDevice average of the per-share mean losses' gradients); the final parameters
  are returned too, for the test's Paddle ParallelExecutor oracle;
- a batch Paddle's rule refuses (10 sequences on 8 devices) and the scope after it;
- ``epoch``: 40 batches of random sequence counts and lengths, the number of compilations.

``--distributed PREFIX`` runs one process of a launched run instead (see :func:`distributed_run`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

if "jax" not in sys.modules and "--xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()

import jax  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import fluidjax as fj  # noqa: E402
from fluidjax import layer  # noqa: E402

LR, MOMENTUM, STEPS = 0.05, 0.9, 5
DICT, CLASSES, TAGS = 60, 2, 5


def build(model: str):
    """(main, startup, loss, feed names) of one model, Momentum-trained; same names every call."""
    main, startup = fj.Program(), fj.Program()
    main.random_seed = startup.random_seed = 7
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        words = layer.data("words", shape=[1], dtype="int64", lod_level=1)
        if model == "lstm":
            from benchmarks import book_models as bm
            net = bm.understand_sentiment_lstm(dict_dim=DICT, emb_dim=8, hid_dim=36, stacked_num=3)
            loss, feeds = net.loss, ["words", "label"]
        elif model == "drnn":
            label = layer.data("label", shape=[1], dtype="int64")
            emb = layer.embedding(words, size=[DICT, 8])
            drnn = layer.DynamicRNN()
            with drnn.block():
                word = drnn.step_input(emb)
                prev = drnn.memory(shape=[12], value=0.0)
                hidden = layer.fc([word, prev], 12, activation="tanh")
                drnn.update_memory(prev, hidden)
                drnn.output(hidden)
            last = layer.sequence_pool(drnn(), "last")
            pred = layer.fc(last, CLASSES, activation="softmax")
            loss = layer.mean(layer.cross_entropy(pred, label))
            feeds = ["words", "label"]
        elif model == "crf":
            target = layer.data("target", shape=[1], dtype="int64", lod_level=1)
            emb = layer.embedding(words, size=[DICT, 8])
            emission = layer.fc(layer.fc(emb, 16, activation="tanh"), TAGS)
            loss = layer.mean(layer.linear_chain_crf(emission, target, param_attr=fj.ParamAttr(name="crfw")))
            feeds = ["words", "target"]
        elif model == "nested":
            # lod_level 2: paragraphs of sentences of words; a label per paragraph.
            words = layer.data("paras", shape=[1], dtype="int64", lod_level=2)
            label = layer.data("label", shape=[1], dtype="int64")
            emb = layer.embedding(words, size=[DICT, 8])
            sentences = layer.sequence_pool(layer.fc(emb, 8, activation="tanh"), "sum")
            paragraphs = layer.sequence_pool(sentences, "max")
            pred = layer.fc(paragraphs, CLASSES, activation="softmax")
            loss = layer.mean(layer.cross_entropy(pred, label))
            feeds = ["paras", "label"]
        elif model == "conv":
            from benchmarks import book_models as bm
            net = bm.understand_sentiment_conv(dict_dim=DICT, emb_dim=8, hid_dim=8)
            loss, feeds = net.loss, ["words", "label"]
        else:
            raise ValueError(model)
        fj.optimizer.Momentum(learning_rate=LR, momentum=MOMENTUM).minimize(loss)
    return main, startup, loss, feeds


def batch_values(rng, count: int, low: int = 2, high: int = 9) -> dict:
    """Host values of one batch of ``count`` sequences: (ids, lengths, labels, tags)."""
    lengths = rng.integers(low, high + 1, count).tolist()
    labels = rng.integers(0, CLASSES, (count, 1)).astype(np.int64)
    ids = np.concatenate([(labels[i, 0] * (DICT // 2) + rng.integers(0, DICT // 2, (n, 1)))
                          for i, n in enumerate(lengths)]).astype(np.int64)
    return {"ids": ids, "lengths": lengths, "labels": labels, "tags": (ids % TAGS).astype(np.int64)}


def feed_of(values: dict, feeds) -> dict:
    lod = [values["lengths"]]
    if "paras" in feeds:    # the sequences as paragraphs of sentences of 1..3 words
        words, ids = [], []
        for n, label in zip(values["lengths"], np.ravel(values["labels"])):
            words.append([1 + (n + j) % 3 for j in range(n)])
            ids += [(int(label) * (DICT // 2) + 3 * j + k) % DICT for j, w in enumerate(words[-1]) for k in range(w)]
        ids = np.asarray(ids, np.int64).reshape(-1, 1)
        return {"paras": fj.create_lod_tensor(ids, [values["lengths"], [w for p in words for w in p]]),
                "label": values["labels"]}
    out = {"words": fj.create_lod_tensor(values["ids"], lod)}
    if "label" in feeds:
        out["label"] = values["labels"]
    if "target" in feeds:
        out["target"] = fj.create_lod_tensor(values["tags"], lod)
    return out


def batches(count: int, steps: int = STEPS, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [batch_values(rng, count) for _ in range(steps)]


def state_names(main) -> list[str]:
    return sorted(n for n, v in main.global_block().vars.items() if v.persistable and v.dtype is not None
                  and not v.is_data and v.type == fj.ir.dtypes.LOD_TENSOR)


def read(scope, names) -> dict:
    return {n: np.array(fj.distributed.gather(scope.find_var(n).get_tensor()._value)) for n in names
            if scope.find_var(n) is not None and scope.find_var(n).get_tensor()._is_initialized()}


def max_rel(a: dict, b: dict) -> float:
    worst = 0.0
    for k in a:
        x, y = np.asarray(a[k], np.float64), np.asarray(b[k], np.float64)
        if x.size:
            worst = max(worst, float(np.abs(x - y).max() / max(np.abs(x).max(), 1e-30)))
    return worst


def train(program, startup, loss, feeds, values, scope=None):
    exe = fj.Executor()
    if scope is None:
        scope = fj.Scope()
        exe.run(startup, scope=scope)
    losses = [np.asarray(exe.run(program, feed=feed_of(v, feeds), fetch_list=[loss], scope=scope)[0]).tolist()
              for v in values]
    return exe, scope, losses


def emulate(main, startup, loss, feeds, values, shares_of) -> dict:
    """Paddle's data-parallel step on one device: each share from the step's starting state, the
    states averaged (Momentum is linear in the gradient, so this is the averaged-gradient step)."""
    from fluidjax.lowering.lod_split import split_host
    exe, scope = fj.Executor(), fj.Scope()
    exe.run(startup, scope=scope)
    names = state_names(main)
    for v in values:
        start = read(scope, names)
        shares = shares_of(len(v["lengths"]))
        offsets = np.concatenate([[0], np.cumsum(v["lengths"])]).tolist()
        ends = []
        for (ids, lod), (labels, _), (tags, _) in zip(split_host(v["ids"], [offsets], shares),
                                                      split_host(v["labels"], None, shares),
                                                      split_host(v["tags"], [offsets], shares)):
            for n, arr in start.items():
                scope.find_var(n).get_tensor().set(arr)
            part = {"ids": ids, "labels": labels, "tags": tags, "lengths": np.diff(lod[0]).tolist()}
            exe.run(main, feed=feed_of(part, feeds), fetch_list=[loss], scope=scope)
            ends.append(read(scope, names))
        for n in names:
            mean = np.mean([e[n].astype(np.float64) for e in ends], axis=0)
            scope.find_var(n).get_tensor().set(mean.astype(start[n].dtype) if start[n].dtype.kind == "f"
                                               else ends[0][n])
    return read(scope, names)


def check_model(model: str, modes) -> dict:
    from fluidjax.lowering.lod_split import paddle_shares
    main, startup, loss, feeds = build(model)
    names = state_names(main)
    params = sorted(p.name for p in main.global_block().all_parameters())
    out = {"devices": jax.device_count()}
    even = batches(16)
    _, scope1, losses1 = train(main, startup, loss, feeds, even)
    one = read(scope1, params)
    for mode in modes:
        compiled = fj.CompiledProgram(main, fj.BuildStrategy(sharding=mode)).with_data_parallel(loss_name=loss.name)
        exe, scope8, losses8 = train(compiled, startup, loss, feeds, even)
        out[f"even_{mode}"] = {"param_rel": max_rel(one, read(scope8, params)),
                               "loss_rel": max(abs(float(np.mean(b)) - float(np.ravel(a)[0])) / abs(float(np.ravel(a)[0]))
                                               for a, b in zip(losses1, losses8)),
                               "fetched_shape": list(np.shape(losses8[0])), "traces": exe.trace_count}
    uneven = batches(15, seed=1)
    compiled = fj.CompiledProgram(main).with_data_parallel(loss_name=loss.name)
    exe, scope8, _ = train(compiled, startup, loss, feeds, uneven)
    got = read(scope8, names)
    want = emulate(main, startup, loss, feeds, uneven, lambda b: paddle_shares(b, jax.device_count()))
    one_rel = None
    if model == "crf":            # GradientScaleStrategy.One: the per-device gradients summed
        strategy = fj.BuildStrategy()
        strategy.gradient_scale_strategy = fj.BuildStrategy.GradientScaleStrategy.One
        summed = fj.CompiledProgram(main, strategy).with_data_parallel(loss_name=loss.name)
        _, scope_one, _ = train(summed, startup, loss, feeds, even)
        # Summed gradients of equal shares of a mean loss are n times the batch's: for Momentum
        # (velocity from 0) that is one device on the whole batch at n times the learning rate.
        exe1, scale_ref = fj.Executor(), fj.Scope()
        exe1.run(startup, scope=scale_ref)
        rate = next(op.inputs["LearningRate"][0] for op in main.global_block().ops if op.type == "momentum")
        lr = scale_ref.find_var(rate).get_tensor()
        lr.set(np.asarray(lr._value) * jax.device_count())
        train(main, startup, loss, feeds, even, scope=scale_ref)
        want_one = read(scale_ref, params)
        out["scale_one"] = {"param_rel": max_rel(want_one, read(scope_one, params)),
                            "mean_rel": max_rel(want_one, read(scope1, params))}
    if model == "crf":            # one device on the whole 15-sequence batches: another step
        _, scope15, _ = train(main, startup, loss, feeds, uneven)
        one_rel = max_rel(read(scope15, params), {k: got[k] for k in params})
    out["uneven"] = {"state_rel": max_rel(want, got), "one_device_rel": one_rel,
                     "param_rel": max_rel({k: want[k] for k in params}, {k: got[k] for k in params}),
                     "params": {k: got[k].tolist() for k in params} if model == "lstm" else None,
                     "traces": exe.trace_count}
    # Paddle's rule refuses 10 sequences on 8 devices: a FeedError, the scope unchanged.
    before = read(scope8, names)
    try:
        exe.run(compiled, feed=feed_of(batches(10, 1, seed=2)[0], feeds), fetch_list=[loss], scope=scope8)
        out["refused"] = None
    except fj.FeedError as exc:
        out["refused"] = str(exc)
    out["refused_scope_unchanged"] = max_rel(before, read(scope8, names)) == 0.0
    if model == "lstm":
        # One feed dict per device, shares as given (1, 2, 3, 1, 2, 1, 2, 3 sequences).
        shares = [1, 2, 3, 1, 2, 1, 2, 3]
        placed = batches(sum(shares), 2, seed=3)
        from fluidjax.lowering.lod_split import split_host
        exe, scopep, _ = train(compiled, startup, loss, feeds, [])
        for v in placed:
            offsets = np.concatenate([[0], np.cumsum(v["lengths"])]).tolist()
            per_place = [feed_of({"ids": ids, "labels": lab, "tags": ids % TAGS, "lengths": np.diff(lod[0]).tolist()},
                                 feeds)
                         for (ids, lod), (lab, _) in zip(split_host(v["ids"], [offsets], shares),
                                                         split_host(v["labels"], None, shares))]
            exe.run(compiled, feed=per_place, fetch_list=[loss], scope=scopep)
        want = emulate(main, startup, loss, feeds, placed, lambda b: shares)
        out["per_place"] = {"state_rel": max_rel(want, read(scopep, names))}
    return out


def epoch_traces(model: str, steps: int = 40) -> dict:
    """40 batches of random sequence counts (each one Paddle's rule spreads over all 8 devices)
    and random lengths: how many times the 8-device step compiled."""
    from fluidjax.lowering.lod_split import paddle_shares
    main, startup, loss, feeds = build(model)
    n = jax.device_count()
    rng = np.random.default_rng(5)
    good = [b for b in range(n, 8 * n + 1) if _splits(b, n, paddle_shares)]
    values = [batch_values(rng, int(rng.choice(good)), 1, 8) for _ in range(steps)]
    compiled = fj.CompiledProgram(main).with_data_parallel(loss_name=loss.name)
    exe, _, losses = train(compiled, startup, loss, feeds, values)
    return {"traces": exe.trace_count, "counts": sorted({len(v["lengths"]) for v in values}),
            "finite": bool(all(np.isfinite(np.ravel(x)).all() for x in losses))}


def _splits(b, n, rule) -> bool:
    try:
        rule(b, n)
        return True
    except fj.FeedError:
        return False


def distributed_run(prefix: str) -> None:
    """One process of a launched run: the sentiment LSTM trained on each process's half of every
    16-sequence batch (split again over the process's devices); writes ``PREFIX.<rank>.json``."""
    fj.distributed.init()
    rank, nproc = jax.process_index(), jax.process_count()
    main, startup, loss, feeds = build("lstm")
    values = batches(16)
    half = 16 // nproc
    exe, scope = fj.Executor(), fj.Scope()
    exe.run(startup, scope=scope)
    compiled = fj.CompiledProgram(main).with_data_parallel(loss_name=loss.name)
    from fluidjax.lowering.lod_split import split_host
    for v in values:
        offsets = np.concatenate([[0], np.cumsum(v["lengths"])]).tolist()
        ids, lod = split_host(v["ids"], [offsets], [half] * nproc)[rank]
        labels = v["labels"][rank * half:(rank + 1) * half]
        part = {"ids": ids, "labels": labels, "tags": ids % TAGS, "lengths": np.diff(lod[0]).tolist()}
        exe.run(compiled, feed=feed_of(part, feeds), fetch_list=[loss], scope=scope)
    params = sorted(p.name for p in main.global_block().all_parameters())
    result = {"rank": rank, "nproc": nproc, "devices": jax.device_count(),
              "params": {k: v.tolist() for k, v in read(scope, params).items()}}
    with open(f"{prefix}.{rank}.json", "w") as f:
        json.dump(result, f)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="lstm,drnn,crf,nested")
    parser.add_argument("--epoch-model", default="conv", help="'' to skip the epoch")
    parser.add_argument("--distributed", metavar="PREFIX")
    args = parser.parse_args(argv)
    if args.distributed:
        distributed_run(args.distributed)
        return
    out = {}
    for m in [m for m in args.models.split(",") if m]:
        start = time.perf_counter()
        out[m] = check_model(m, ("none", "full") if m == "lstm" else ("none",))
        print(f"dp_lod_worker: {m} took {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
    if args.epoch_model:
        out["epoch"] = epoch_traces(args.epoch_model)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
