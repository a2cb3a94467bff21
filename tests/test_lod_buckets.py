"""FLAGS_bucket_sequences: the number of sequences of a LoD feed padded to a bucket (empty
sequences), a label with one row per sequence padded with it as counted rows; a reader batching
by token count (a new sequence count every batch) compiles once per bucket, and every result
equals feeding each sequence alone."""

import numpy as np
import pytest

import fluidjax as fj
from fluidjax import layer

VOCAB, EMB, CLASSES = 30, 8, 3


@pytest.fixture
def bucketed():
    before = fj.get_flags("FLAGS_bucket_sequences")
    fj.set_flags({"FLAGS_bucket_sequences": True})
    yield
    fj.set_flags(before)


def test_the_flag_is_on_by_default():
    from fluidjax.lowering import flags
    assert flags._DEFAULTS["FLAGS_bucket_sequences"] is True


def _lod(data, lengths):
    t = fj.LoDTensor(np.asarray(data))
    t.set_recursive_sequence_lengths([list(lengths)])
    return t


def _model(encoder):
    main, startup = fj.Program(), fj.Program()
    main.random_seed = startup.random_seed = 7
    with fj.program_guard(main, startup):
        words = layer.data("words", shape=[1], dtype="int64", lod_level=1)
        label = layer.data("label", shape=[1], dtype="int64")
        emb = layer.embedding(words, size=[VOCAB, EMB])
        if encoder == "lstm":
            proj = layer.fc(emb, size=4 * 6)
            hidden, _ = layer.dynamic_lstm(proj, size=4 * 6)
        else:
            hidden = layer.sequence_conv(emb, num_filters=6, filter_size=3)
        pooled = layer.sequence_pool(hidden, "max" if encoder == "conv" else "average")
        logits = layer.fc(pooled, size=CLASSES)
        loss = layer.softmax_with_cross_entropy(logits, label)
        avg = layer.mean(loss)
        fj.append_backward(avg)
    emb_w = [p.name for p in main.global_block().all_parameters() if p.shape == (VOCAB, EMB)][0]
    return main, startup, [logits, loss, avg, emb_w + "@GRAD"]


def _batch(rng):
    n = int(rng.integers(1, 17))
    lengths = rng.integers(0, 6, n)            # empty sequences included
    lengths[rng.integers(0, n)] = max(1, lengths.max())
    ids = rng.integers(0, VOCAB, (int(lengths.sum()), 1)).astype(np.int64)
    label = rng.integers(0, CLASSES, (n, 1)).astype(np.int64)
    return lengths, ids, label


@pytest.mark.parametrize("encoder", ["conv", "lstm"])
def test_token_batches_compile_per_bucket_and_match_single_sequences(encoder, bucketed):
    main, startup, fetch = _model(encoder)
    exe = fj.Executor()
    scope = fj.Scope()
    with fj.scope_guard(scope):
        exe.run(startup)
        rng = np.random.default_rng(3)
        batches = [_batch(rng) for _ in range(40)]
        start = exe.trace_count
        results = [exe.run(main, feed={"words": _lod(ids, lengths), "label": label}, fetch_list=fetch)
                   for lengths, ids, label in batches]
        traced = exe.trace_count - start
        assert len({len(b[0]) for b in batches}) > 8     # many distinct sequence counts
        assert traced <= 11, traced
        # oracle: each sequence alone, without bucketing
        fj.set_flags({"FLAGS_bucket_sequences": False})
        for (lengths, ids, label), (logits, loss, avg, grad) in list(zip(batches, results))[:6]:
            n = len(lengths)
            assert logits.shape == (n, CLASSES) and loss.shape == (n, 1)
            starts = np.concatenate([[0], np.cumsum(lengths)])
            alone = [exe.run(main, feed={"words": _lod(ids[starts[i]:starts[i + 1]], [lengths[i]]),
                                         "label": label[i:i + 1]}, fetch_list=fetch) for i in range(n)]
            np.testing.assert_allclose(logits, np.concatenate([a[0] for a in alone]), rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(loss, np.concatenate([a[1] for a in alone]), rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(avg, np.mean([float(a[2]) for a in alone]), rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(grad, np.mean([a[3] for a in alone], axis=0), rtol=1e-4, atol=1e-6)


def test_fetched_lod_value_shows_only_the_real_sequences(bucketed):
    main, startup = fj.Program(), fj.Program()
    with fj.program_guard(main, startup):
        x = layer.data("x", shape=[2], lod_level=1)
        soft = layer.sequence_softmax(layer.fc(x, size=1, bias_attr=False))
    exe = fj.Executor()
    exe.run(startup)
    data = np.arange(10, dtype=np.float32).reshape(5, 2) / 10
    lengths = [2, 0, 3, 0, 0]                           # trailing real empty sequences kept
    got = exe.run(main, feed={"x": _lod(data, lengths)}, fetch_list=[soft], return_numpy=False)[0]
    assert got.recursive_sequence_lengths() == [lengths]
    rows = np.array(got)
    for s, e in ((0, 2), (2, 5)):
        np.testing.assert_allclose(rows[s:e].sum(), 1.0, rtol=1e-6)


def test_flag_off_keeps_the_sequence_count_in_the_signature(bucketed):
    fj.set_flags({"FLAGS_bucket_sequences": False})
    main, startup = fj.Program(), fj.Program()
    with fj.program_guard(main, startup):
        x = layer.data("x", shape=[2], lod_level=1)
        out = layer.sequence_pool(x, "sum")
    exe = fj.Executor()
    before = exe.trace_count
    for n in (3, 5):
        got = exe.run(main, feed={"x": _lod(np.ones((n, 2), np.float32), [1] * n)}, fetch_list=[out])[0]
        assert got.shape == (n, 2)
    assert exe.trace_count - before == 2


def test_crf_costs_count_only_real_sequences(bucketed):
    """linear_chain_crf's one-row-per-sequence cost: counted, so its mean and gradient are those
    of the real sequences (oracle: every sequence alone, flag off)."""
    tags = 3
    main, startup = fj.Program(), fj.Program()
    main.random_seed = startup.random_seed = 5
    with fj.program_guard(main, startup):
        x = layer.data("x", shape=[4], lod_level=1)
        target = layer.data("target", shape=[1], dtype="int64", lod_level=1)
        emission = layer.fc(x, size=tags)
        cost = layer.linear_chain_crf(emission, target, param_attr=fj.ParamAttr(name="crfw"))
        avg = layer.mean(cost)
        fj.append_backward(avg)
    fetch = [cost, avg, "crfw@GRAD"]
    exe, scope = fj.Executor(), fj.Scope()
    rng = np.random.default_rng(11)
    with fj.scope_guard(scope):
        exe.run(startup)
        batches = []
        for _ in range(12):
            n = int(rng.integers(1, 10))
            lengths = rng.integers(1, 5, n)
            rows = int(lengths.sum())
            batches.append((lengths, rng.standard_normal((rows, 4)).astype(np.float32),
                            rng.integers(0, tags, (rows, 1)).astype(np.int64)))
        start = exe.trace_count
        got = [exe.run(main, feed={"x": _lod(d, l), "target": _lod(t, l)}, fetch_list=fetch)
               for l, d, t in batches]
        assert exe.trace_count - start <= 8
        fj.set_flags({"FLAGS_bucket_sequences": False})
        for (lengths, data, target), (c, a, g) in list(zip(batches, got))[:4]:
            starts = np.concatenate([[0], np.cumsum(lengths)])
            alone = [exe.run(main, feed={"x": _lod(data[s:e], [e - s]), "target": _lod(target[s:e], [e - s])},
                             fetch_list=fetch) for s, e in zip(starts[:-1], starts[1:])]
            assert c.shape == (len(lengths), 1)
            np.testing.assert_allclose(c, np.concatenate([x[0] for x in alone]), rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(a, np.mean([float(x[1]) for x in alone]), rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(g, np.mean([x[2] for x in alone], axis=0), rtol=1e-4, atol=1e-5)


def _alone(exe, main, feed_of, lengths, fetch):
    """Every sequence fed alone (flag off): a list of fetch lists."""
    starts = np.concatenate([[0], np.cumsum(lengths)])
    return [exe.run(main, feed=feed_of(i, starts[i], starts[i + 1]), fetch_list=fetch) for i in range(len(lengths))]


def test_accuracy_of_a_per_sequence_label_counts_real_sequences(bucketed):
    """accuracy reads the label with the logits' top-k: both counted rows, so the label is bucketed
    with the sequences (it was left exact: one compilation per count) and the accuracy is that of
    the real sequences (oracle: the flag off, exact shapes)."""
    main, startup = fj.Program(), fj.Program()
    main.random_seed = startup.random_seed = 7
    with fj.program_guard(main, startup):
        words = layer.data("words", shape=[1], dtype="int64", lod_level=1)
        label = layer.data("label", shape=[1], dtype="int64")
        pooled = layer.sequence_pool(layer.embedding(words, size=[VOCAB, EMB]), "sum")
        logits = layer.fc(pooled, size=CLASSES)
        acc = layer.accuracy(layer.softmax(logits), label, k=1)
        loss = layer.mean(layer.softmax_with_cross_entropy(logits, label))
    exe, scope = fj.Executor(), fj.Scope()
    rng = np.random.default_rng(5)
    batches = [_batch(rng) for _ in range(30)]
    with fj.scope_guard(scope):
        exe.run(startup)
        start = exe.trace_count
        got = [exe.run(main, feed={"words": _lod(ids, lengths), "label": label}, fetch_list=[acc, loss])
               for lengths, ids, label in batches]
        traced = exe.trace_count - start
        # one compilation per (sequence-count bucket, row bucket, longest-sequence bucket), fewer
        # than one per distinct sequence count (the label is bucketed too)
        from fluidjax.lowering.lod_value import bucket
        signatures = {(bucket(len(l)), bucket(int(sum(l))), bucket(int(max(l)))) for l, _, _ in batches}
        assert traced <= len(signatures) < len({len(b[0]) for b in batches}), (traced, len(signatures))
        fj.set_flags({"FLAGS_bucket_sequences": False})
        for (lengths, ids, label), (a, l) in zip(batches, got):
            want = exe.run(main, feed={"words": _lod(ids, lengths), "label": label}, fetch_list=[acc, loss])
            np.testing.assert_allclose(a, want[0], rtol=1e-6)
            np.testing.assert_allclose(l, want[1], rtol=1e-5, atol=1e-6)


def _drnn_model():
    """A DynamicRNN (lod_tensor_to_array, shrink_rnn_memory, a boot memory reordered from a
    per-sequence value: counted rows) whose last steps feed a per-sequence loss."""
    main, startup = fj.Program(), fj.Program()
    main.random_seed = startup.random_seed = 9
    with fj.program_guard(main, startup):
        words = layer.data("words", shape=[1], dtype="int64", lod_level=1)
        label = layer.data("label", shape=[1], dtype="int64")
        emb = layer.embedding(words, size=[VOCAB, EMB], param_attr=fj.ParamAttr(name="emb"))
        boot = layer.fc(layer.sequence_pool(emb, "average"), size=5, activation="tanh")
        drnn = layer.DynamicRNN()
        with drnn.block():
            word = drnn.step_input(emb)
            prev = drnn.memory(init=boot, need_reorder=True)
            hidden = layer.fc([word, prev], 5, activation="tanh")
            drnn.update_memory(prev, hidden)
            drnn.output(hidden)
        last = layer.sequence_pool(drnn(), "last")
        logits = layer.fc(last, size=CLASSES)
        loss = layer.softmax_with_cross_entropy(logits, label)
        avg = layer.mean(loss)
        fj.append_backward(avg)
    return main, startup, [logits.name, loss.name, avg.name, "emb@GRAD"]


def test_dynamic_rnn_array_path_under_buckets_equals_each_sequence_alone(bucketed):
    main, startup, fetch = _drnn_model()
    exe, scope = fj.Executor(), fj.Scope()
    rng = np.random.default_rng(8)
    batches = []
    for _ in range(16):
        n = int(rng.integers(1, 12))
        lengths = rng.integers(1, 5, n)
        batches.append((lengths, rng.integers(0, VOCAB, (int(lengths.sum()), 1)).astype(np.int64),
                        rng.integers(0, CLASSES, (n, 1)).astype(np.int64)))
    with fj.scope_guard(scope):
        exe.run(startup)
        start = exe.trace_count
        got = [exe.run(main, feed={"words": _lod(ids, lengths), "label": label}, fetch_list=fetch)
               for lengths, ids, label in batches]
        assert len({len(b[0]) for b in batches}) > 5
        assert exe.trace_count - start <= 9, exe.trace_count - start
        fj.set_flags({"FLAGS_bucket_sequences": False})
        for (lengths, ids, label), (logits, loss, avg, grad) in list(zip(batches, got))[:4]:
            alone = _alone(exe, main, lambda i, s, e: {"words": _lod(ids[s:e], [e - s]), "label": label[i:i + 1]},
                           lengths, fetch)
            assert logits.shape == (len(lengths), CLASSES)
            np.testing.assert_allclose(logits, np.concatenate([a[0] for a in alone]), rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(loss, np.concatenate([a[1] for a in alone]), rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(avg, np.mean([float(a[2]) for a in alone]), rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(grad, np.mean([a[3] for a in alone], axis=0), rtol=1e-4, atol=1e-6)


def test_a_per_sequence_value_an_op_cannot_take_counted_keeps_the_exact_count(bucketed):
    """transpose of the pooled rows has no count role: the step falls back to the exact sequence
    count (no padding sequences), so the result is Paddle's, not a refusal or padded rows."""
    from fluidjax.lowering.feeds import counted_reach
    main, startup = fj.Program(), fj.Program()
    with fj.program_guard(main, startup):
        x = layer.data("x", shape=[2], lod_level=1)
        pooled = layer.sequence_pool(x, "sum")
        out = layer.reduce_sum(layer.transpose(pooled, [1, 0]), dim=1)
    assert counted_reach(main.global_block().ops, set(), from_lod=True) == "transpose2"
    exe = fj.Executor()
    rng = np.random.default_rng(1)
    for n in (3, 5, 6):
        data = rng.standard_normal((2 * n, 2)).astype(np.float32)
        got, = exe.run(main, feed={"x": _lod(data, [2] * n)}, fetch_list=[out])
        np.testing.assert_allclose(got, data.sum(axis=0), rtol=1e-5, atol=1e-6)
