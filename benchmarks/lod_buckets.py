"""Token-count batching: compilations and results with and without ``FLAGS_bucket_sequences``.

A reader that batches by token count gives a different number of sequences every batch. This
feeds the same N batches (random sequence counts in 1..MAX_SEQS, random lengths 0..MAX_LEN) to a
sequence model (embedding -> sequence_conv -> max sequence_pool -> fc -> softmax_with_cross_entropy
against a per-sequence label -> mean, with its backward) twice: with the flag off (one
compilation per distinct sequence count and row bucket) and with the defaults (the flag is on:
one per bucket pair). It prints the compile counts, the wall time of each epoch (compilation
included), whether every batch's per-sequence losses and mean loss agree between the two runs
(the flag-off run is the exact Paddle layout) and with feeding every sequence alone.

The dense case: N batches of a BERT-like masked-LM head (an encoder output [B*T, H], the rows at
a random number of masked positions gathered, fc, softmax_with_cross_entropy, mean, backward):
the positions and labels feeds change their first dim every batch with no LoD feed beside them.
Compile counts off and on, and the largest loss / gradient difference.

    python benchmarks/lod_buckets.py [--batches 40] [--max-seqs 16] [--max-len 6]

``--row-buckets`` (``FLAGS_lod_row_buckets``, ``docs/lod.md``, "Finer row buckets"): instead,
``--batches`` (default 200 here) batches of 32 and of 64 sequences of uniform lengths 10..200 (the
book's sentiment reader): how many distinct row counts each value of the flag gives (the rule,
``lod_value.row_bucket``), the padding rows it leaves, and the compilations a small sequence
model (embedding -> fc -> sum pool -> fc -> loss, backward) really makes over them.

    python benchmarks/lod_buckets.py --row-buckets [--batches 200]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import fluidjax as fj  # noqa: E402
from fluidjax import layer  # noqa: E402

VOCAB, EMB, CLASSES = 30, 8, 3


def build():
    main, startup = fj.Program(), fj.Program()
    main.random_seed = startup.random_seed = 7
    with fj.program_guard(main, startup):
        words = layer.data("words", shape=[1], dtype="int64", lod_level=1)
        label = layer.data("label", shape=[1], dtype="int64")
        hidden = layer.sequence_conv(layer.embedding(words, size=[VOCAB, EMB]), num_filters=6, filter_size=3)
        logits = layer.fc(layer.sequence_pool(hidden, "max"), size=CLASSES)
        loss = layer.softmax_with_cross_entropy(logits, label)
        avg = layer.mean(loss)
        fj.append_backward(avg)
    return main, startup, [loss, avg]


def batches(n, max_seqs, max_len, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        count = int(rng.integers(1, max_seqs + 1))
        lengths = rng.integers(0, max_len + 1, count)
        lengths[0] = max(1, lengths[0])
        ids = rng.integers(0, VOCAB, (int(lengths.sum()), 1)).astype(np.int64)
        out.append((lengths.tolist(), ids, rng.integers(0, CLASSES, (count, 1)).astype(np.int64)))
    return out


def epoch(flag, data):
    if flag is not None:
        fj.set_flags({"FLAGS_bucket_sequences": flag})
    main, startup, fetch = build()
    exe, scope = fj.Executor(), fj.Scope()
    with fj.scope_guard(scope):
        exe.run(startup)
        before, start = exe.trace_count, time.perf_counter()
        results = []
        for lengths, ids, label in data:
            t = fj.LoDTensor(ids)
            t.set_recursive_sequence_lengths([lengths])
            results.append(exe.run(main, feed={"words": t, "label": label}, fetch_list=fetch))
        took, traced = time.perf_counter() - start, exe.trace_count - before
        if flag is not None:
            return traced, took, results
        alone = []            # every sequence fed alone (one sequence: nothing to pad)
        for lengths, ids, label in data:
            starts = np.concatenate([[0], np.cumsum(lengths)])
            runs = []
            for i, n in enumerate(lengths):
                t = fj.LoDTensor(ids[starts[i]:starts[i + 1]])
                t.set_recursive_sequence_lengths([[n]])
                runs.append(exe.run(main, feed={"words": t, "label": label[i:i + 1]}, fetch_list=fetch))
            alone.append(runs)
        return traced, took, results, alone


# -- the dense case: BERT-like masked positions ------------------------------------------------------
BATCH, SEQ, HID, MVOCAB = 4, 16, 16, 50


def build_masked_lm():
    main, startup = fj.Program(), fj.Program()
    main.random_seed = startup.random_seed = 3
    with fj.program_guard(main, startup):
        src = layer.data("src", shape=[BATCH, SEQ, 1], dtype="int64", append_batch_size=False)
        pos = layer.data("mask_pos", shape=[-1, 1], dtype="int64", append_batch_size=False)
        label = layer.data("mask_label", shape=[-1, 1], dtype="int64", append_batch_size=False)
        emb = layer.embedding(src, size=[MVOCAB, HID], param_attr=fj.ParamAttr(name="emb"))
        flat = layer.reshape(layer.fc(emb, size=HID, num_flatten_dims=2, act="tanh"), [-1, HID])
        logits = layer.fc(layer.gather(flat, pos), size=MVOCAB, param_attr=fj.ParamAttr(name="out_w"))
        loss = layer.softmax_with_cross_entropy(logits, label)
        avg = layer.mean(loss)
        fj.append_backward(avg)
    return main, startup, [loss.name, avg.name, "emb@GRAD", "out_w@GRAD"]


def masked_batches(n, seed=1):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        k = int(rng.integers(1, 41))
        out.append({"src": rng.integers(0, MVOCAB, (BATCH, SEQ, 1)).astype(np.int64),
                    "mask_pos": rng.choice(BATCH * SEQ, k, replace=False).reshape(k, 1).astype(np.int64),
                    "mask_label": rng.integers(0, MVOCAB, (k, 1)).astype(np.int64)})
    return out


def masked_epoch(flag, data):
    if flag is not None:
        fj.set_flags({"FLAGS_bucket_sequences": flag})
    main, startup, fetch = build_masked_lm()
    exe, scope = fj.Executor(), fj.Scope()
    with fj.scope_guard(scope):
        exe.run(startup)
        before, start = exe.trace_count, time.perf_counter()
        results = [exe.run(main, feed=feed, fetch_list=fetch) for feed in data]
        return exe.trace_count - before, time.perf_counter() - start, results


# -- finer row buckets (FLAGS_lod_row_buckets) --------------------------------------------------------
def row_bucket_epochs(n_batches: int) -> None:
    from fluidjax.lowering.lod_value import row_bucket

    main, startup = fj.Program(), fj.Program()
    main.random_seed = startup.random_seed = 7
    with fj.program_guard(main, startup):
        words = layer.data("words", shape=[1], dtype="int64", lod_level=1)
        label = layer.data("label", shape=[1], dtype="int64")
        hidden = layer.fc(layer.embedding(words, size=[VOCAB, EMB]), size=8, act="tanh")
        logits = layer.fc(layer.sequence_pool(hidden, "sum"), size=CLASSES)
        avg = layer.mean(layer.softmax_with_cross_entropy(logits, label))
        fj.append_backward(avg)
    for batch in (32, 64):
        rng = np.random.default_rng(batch)
        data = []
        for _ in range(n_batches):
            lengths = rng.integers(10, 201, batch).tolist()
            data.append((lengths, rng.integers(0, VOCAB, (sum(lengths), 1)).astype(np.int64),
                         rng.integers(0, CLASSES, (batch, 1)).astype(np.int64)))
        rows = np.asarray([sum(b[0]) for b in data])
        print(f"batch {batch}: {n_batches} batches, real rows {rows.min()}..{rows.max()} (mean {rows.mean():.0f})")
        losses = {}
        for k in (1, 2, 4, 8):
            padded = np.asarray([row_bucket(int(n), k) for n in rows])
            line = (f"  FLAGS_lod_row_buckets={k}: {len(set(padded.tolist()))} distinct row counts "
                    f"{sorted(set(padded.tolist()))}, padding {100 * (padded / rows - 1).mean():.1f}% of the real rows")
            if k in (1, 8):
                fj.set_flags({"FLAGS_lod_row_buckets": k})
                exe, scope = fj.Executor(), fj.Scope()
                exe.run(startup, scope=scope)
                before = exe.trace_count
                losses[k] = [float(exe.run(main, feed={"words": fj.create_lod_tensor(ids, [lengths]), "label": lab},
                                           fetch_list=[avg], scope=scope)[0]) for lengths, ids, lab in data]
                line += f"; {exe.trace_count - before} compilations"
            print(line)
        fj.set_flags({"FLAGS_lod_row_buckets": 1})
        print(f"  losses, 8 vs 1: max |diff| {max(abs(a - b) for a, b in zip(losses[1], losses[8])):.1e}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=None)
    parser.add_argument("--max-seqs", type=int, default=16)
    parser.add_argument("--max-len", type=int, default=6)
    parser.add_argument("--row-buckets", action="store_true", help="FLAGS_lod_row_buckets' compile counts instead")
    args = parser.parse_args()
    if args.row_buckets:
        row_bucket_epochs(args.batches or 200)
        return
    args.batches = args.batches or 40
    data = batches(args.batches, args.max_seqs, args.max_len)
    print(f"{args.batches} batches, {len({len(b[0]) for b in data})} distinct sequence counts")
    off = epoch(False, data)
    fj.set_flags({"FLAGS_bucket_sequences": True})     # the default
    on = epoch(None, data)
    worst = max(float(np.max(np.abs(np.asarray(a[0]) - np.asarray(b[0])))) for a, b in zip(off[2], on[2]))
    worst_mean = max(abs(float(a[1]) - float(b[1])) for a, b in zip(off[2], on[2]))
    shapes = all(np.asarray(a[0]).shape == np.asarray(b[0]).shape for a, b in zip(off[2], on[2]))
    alone = max(float(np.max(np.abs(np.asarray(b[0])[:, 0] - np.asarray([float(r[0][0, 0]) for r in runs]))))
                for b, runs in zip(on[2], on[3]))
    alone_mean = max(abs(float(b[1]) - float(np.mean([float(r[1]) for r in runs]))) for b, runs in zip(on[2], on[3]))
    print(f"flag off: {off[0]} compilations, {off[1]:.2f} s")
    print(f"flag on (default):  {on[0]} compilations, {on[1]:.2f} s")
    print(f"results agree: shapes {shapes}, per-sequence loss max |diff| {worst:.2e}, "
          f"mean loss max |diff| {worst_mean:.2e}")
    print(f"each sequence alone: per-sequence loss max |diff| {alone:.2e}, mean loss max |diff| {alone_mean:.2e}")
    dense = masked_batches(args.batches)
    print(f"masked-LM head: {args.batches} batches, {len({len(b['mask_pos']) for b in dense})} distinct "
          "masked-position counts")
    d_off = masked_epoch(False, dense)
    fj.set_flags({"FLAGS_bucket_sequences": True})
    d_on = masked_epoch(None, dense)
    d_worst = max(float(np.max(np.abs(np.asarray(x) - np.asarray(y))))
                  for a, b in zip(d_off[2], d_on[2]) for x, y in zip(a, b))
    d_shapes = all(np.asarray(a[0]).shape == np.asarray(b[0]).shape for a, b in zip(d_off[2], d_on[2]))
    print(f"flag off: {d_off[0]} compilations, {d_off[1]:.2f} s")
    print(f"flag on (default):  {d_on[0]} compilations, {d_on[1]:.2f} s")
    print(f"results agree: shapes {d_shapes}, losses and gradients max |diff| {d_worst:.2e}")

if __name__ == "__main__":
    main()
