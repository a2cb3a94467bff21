"""FLAGS_bucket_sequences (on by default) for dense feeds whose first dim changes every batch with
no LoD feed beside it (BERT's masked positions and labels): once a step has seen
``feeds.DENSE_ROWS_AFTER`` distinct first dims, such a feed is carried as counted rows padded to a
bucket (docs/ops_data_dependent.md), so an epoch compiles a handful of times; losses, fetched rows
and gradients equal the unbucketed run, and a feed some op could not take counted keeps its exact
shape."""

import numpy as np
import pytest

import fluidjax as fj
from fluidjax import layer

BATCH, SEQ, HID, VOCAB = 2, 8, 6, 11


@pytest.fixture
def flag():
    before = fj.get_flags("FLAGS_bucket_sequences")
    yield
    fj.set_flags(before)


def _masked_lm():
    """A BERT-like masked-LM head: an encoder output [B*T, H], the rows at the masked positions
    gathered, fc to the vocabulary, softmax_with_cross_entropy against the masked labels, mean."""
    main, startup = fj.Program(), fj.Program()
    main.random_seed = startup.random_seed = 3
    with fj.program_guard(main, startup):
        src = layer.data("src", shape=[BATCH, SEQ, 1], dtype="int64", append_batch_size=False)
        pos = layer.data("mask_pos", shape=[-1, 1], dtype="int64", append_batch_size=False)
        label = layer.data("mask_label", shape=[-1, 1], dtype="int64", append_batch_size=False)
        emb = layer.embedding(src, size=[VOCAB, HID], param_attr=fj.ParamAttr(name="emb"))
        enc = layer.fc(emb, size=HID, num_flatten_dims=2, act="tanh")
        flat = layer.reshape(enc, [-1, HID])
        picked = layer.gather(flat, pos)
        logits = layer.fc(picked, size=VOCAB, param_attr=fj.ParamAttr(name="out_w"))
        loss = layer.softmax_with_cross_entropy(logits, label)
        avg = layer.mean(loss)
        fj.append_backward(avg)
    return main, startup, [loss.name, avg.name, "emb@GRAD", "out_w@GRAD"]


def _batches(n, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        k = int(rng.integers(1, BATCH * SEQ + 1))
        pos = rng.choice(BATCH * SEQ, k, replace=False).reshape(k, 1).astype(np.int64)
        out.append({"src": rng.integers(0, VOCAB, (BATCH, SEQ, 1)).astype(np.int64), "mask_pos": pos,
                    "mask_label": rng.integers(0, VOCAB, (k, 1)).astype(np.int64)})
    return out


def _epoch(main, startup, fetch, batches, on):
    fj.set_flags({"FLAGS_bucket_sequences": on})
    exe, scope = fj.Executor(), fj.Scope()
    with fj.scope_guard(scope):
        exe.run(startup)
        start = exe.trace_count
        got = [exe.run(main, feed=b, fetch_list=fetch) for b in batches]
        return exe.trace_count - start, got


def test_masked_positions_compile_per_bucket_and_equal_unbucketed(flag):
    main, startup, fetch = _masked_lm()
    batches = _batches(24)
    assert len({len(b["mask_pos"]) for b in batches}) >= 10
    on_traces, on = _epoch(main, startup, fetch, batches, True)
    off_traces, off = _epoch(main, startup, fetch, batches, False)
    assert on_traces <= 2 + 5, on_traces          # the first distinct dims exact, then buckets 1..16
    assert off_traces == len({len(b["mask_pos"]) for b in batches})
    for b, a, e in zip(batches, on, off):
        assert a[0].shape == (len(b["mask_pos"]), 1)        # the fetched loss holds the real rows only
        for x, y in zip(a, e):
            np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)


def test_counted_rows_reach_numpy_oracle(flag):
    """The bucketed losses against NumPy (the fetched encoder rows, out_w and the labels)."""
    main, startup, fetch = _masked_lm()
    flat = [op.output("Out")[0] for op in main.global_block().ops if op.type in ("reshape2", "reshape")][0]
    batches = _batches(8, seed=1)
    fj.set_flags({"FLAGS_bucket_sequences": True})
    exe, scope = fj.Executor(), fj.Scope()
    with fj.scope_guard(scope):
        exe.run(startup)
        w = np.asarray(scope.find_var("out_w").get_tensor())
        bias = [p.name for p in main.global_block().all_parameters() if p.shape == (VOCAB,)][0]
        b = np.asarray(scope.find_var(bias).get_tensor())
        for feed in batches:
            enc, loss, avg = exe.run(main, feed=feed, fetch_list=[flat, fetch[0], fetch[1]])
            logits = enc[feed["mask_pos"][:, 0]] @ w + b
            logits = logits - logits.max(axis=1, keepdims=True)
            logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
            want = -logp[np.arange(len(logp)), feed["mask_label"][:, 0]][:, None]
            np.testing.assert_allclose(loss, want, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(avg, want.mean(), rtol=1e-5, atol=1e-5)


def test_a_feed_an_op_cannot_take_counted_keeps_its_exact_shape(flag):
    """transpose moves the rows off dim 0 (no count role): the feed is never padded, one
    compilation per distinct first dim, results exact."""
    fj.set_flags({"FLAGS_bucket_sequences": True})
    main, startup = fj.Program(), fj.Program()
    with fj.program_guard(main, startup):
        x = layer.data("x", shape=[-1, 3], append_batch_size=False)
        out = layer.reduce_sum(layer.transpose(x, [1, 0]), dim=1)
    exe = fj.Executor()
    exe.run(startup)
    rng = np.random.default_rng(0)
    start = exe.trace_count
    sizes = [3, 5, 6, 7, 9, 10]
    for n in sizes:
        data = rng.standard_normal((n, 3)).astype(np.float32)
        got, = exe.run(main, feed={"x": data}, fetch_list=[out])
        np.testing.assert_allclose(got, data.sum(axis=0), rtol=1e-5)
    assert exe.trace_count - start == len(sizes)


def test_a_fixed_batch_and_an_epoch_tail_are_not_padded(flag):
    """Two distinct first dims (a full batch and an epoch's last, shorter one) compile twice and
    are never padded; the fetched rows are the fed ones."""
    fj.set_flags({"FLAGS_bucket_sequences": True})
    main, startup = fj.Program(), fj.Program()
    with fj.program_guard(main, startup):
        x = layer.data("x", shape=[3])
        y = layer.fc(x, size=2)
    exe = fj.Executor()
    exe.run(startup)
    start = exe.trace_count
    for n in (6, 6, 5, 6, 5):
        got, = exe.run(main, feed={"x": np.ones((n, 3), np.float32)}, fetch_list=[y])
        assert got.shape == (n, 2)
    assert exe.trace_count - start == 2
