"""Paddle's feed rule (issue 28 items 3 and 9): only ``need_check_feed`` variables (``fluid.data``,
``paddle.static.data``) are checked against their declaration; for Fluid 1.x's ``layers.data``
and ``py_reader`` slots the declared dtype and dims are advice, the fed array decides, and the
program's shapes are re-inferred from it. Checked against Paddle 2.6.2 running the same program
bytes with the same feeds, and NumPy."""

import warnings

import numpy as np
import pytest

import fluidjax as fluid
import fluidjax as fj

import paddle_oracle as po


def _programs():
    return fluid.Program(), fluid.Program()


def test_bert_style_padded_batch_into_a_longer_declared_slot_matches_paddle():
    """A reader pads each batch to its own longest sequence: (8, 13, 1) into a slot declared
    (-1, 16, 1); Paddle runs the same bytes on it, and so do we."""
    main, startup = _programs()
    with fluid.program_guard(main, startup), fj.unique_name.guard():
        ids = fluid.layers.data("src_ids", shape=[16, 1], dtype="int64")
        mask = fluid.layers.data("mask", shape=[16, 1], dtype="float32")
        emb = fluid.layers.embedding(ids, size=[50, 6])                       # (-1, 16, 1, 6)? see below
        emb = fluid.layers.reshape(emb, [0, 0, 6])
        hidden = fluid.layers.fc(emb, 5, num_flatten_dims=2, act="tanh")
        masked = fluid.layers.elementwise_mul(hidden, mask, axis=0)
        pooled = fluid.layers.reduce_sum(masked, dim=1)
    assert not ids.need_check_feed and ids.shape == (-1, 16, 1)
    rng = np.random.default_rng(0)
    feed = {"src_ids": rng.integers(0, 50, (8, 13, 1)).astype("int64"),
            "mask": (rng.random((8, 13, 1)) > 0.3).astype("float32")}
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    ours, = exe.run(main, feed=feed, fetch_list=[pooled], scope=scope)
    assert ours.shape == (8, 5)
    theirs, = po.run(main.serialize(), feed, [pooled.name], po.persistable_values(main, scope))
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


def test_a_flat_array_into_a_column_slot_and_an_unread_empty_feed_run():
    """A (512,) array into a slot declared (-1, 1); an empty (0, 1) feed that no op reads, next to a
    training batch_norm (which refuses an empty batch it reads)."""
    main, startup = _programs()
    with fluid.program_guard(main, startup), fj.unique_name.guard():
        x = fluid.layers.data("x", shape=[1], dtype="float32")
        unused = fluid.layers.data("unused", shape=[1], dtype="float32")
        y = fluid.layers.scale(x, 3.0, bias=1.0)
        feat = fluid.layers.data("feat", shape=[4], dtype="float32")
        bn = fluid.layers.batch_norm(feat)
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    flat = np.arange(512, dtype="float32")
    feats = np.random.default_rng(1).random((3, 4)).astype("float32")
    out, _ = exe.run(main, feed={"x": flat, "unused": np.zeros((0, 1), "float32"), "feat": feats},
                     fetch_list=[y, bn], scope=scope)
    assert out.shape == (512,)
    np.testing.assert_allclose(out, flat * 3 + 1)
    with pytest.raises(fj.FeedError, match="empty batch"):       # read by batch_norm: refused
        exe.run(main, feed={"x": flat, "unused": np.zeros((0, 1), "float32"),
                            "feat": np.zeros((0, 4), "float32")}, fetch_list=[y, bn], scope=scope)
    theirs = po.run(main.serialize(), {"x": flat, "unused": np.zeros((0, 1), "float32"), "feat": feats},
                    [y.name], po.persistable_values(main, scope))[0]
    np.testing.assert_allclose(out, theirs)


def test_a_need_check_feed_variable_still_refuses_another_shape_or_dtype():
    """Red team: ``fluid.data`` declared (4, 3) refuses a (5, 3) array and a float64 one."""
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [4, 3], "float32")
        s = fluid.layers.reduce_sum(x)
    assert x.need_check_feed
    exe = fluid.Executor(fluid.CPUPlace())
    with pytest.raises(fj.FeedError, match=r"\(5, 3\).*\(4, 3\)"):
        exe.run(main, feed={"x": np.ones((5, 3), "float32")}, fetch_list=[s])
    with pytest.raises(fj.FeedError, match="float64"):
        exe.run(main, feed={"x": np.ones((4, 3), "float64")}, fetch_list=[s])
    assert float(exe.run(main, feed={"x": np.ones((4, 3), "float32")}, fetch_list=[s])[0]) == 12
    # and the parsed bytes keep the flag: a Paddle 2.x program's data variables stay checked
    parsed = fj.Program.parse_from_string(main.serialize())
    assert parsed.global_block().var("x").need_check_feed
    with pytest.raises(fj.FeedError):
        exe.run(parsed, feed={"x": np.ones((5, 3), "float32")}, fetch_list=[s.name])


def test_what_an_op_cannot_take_is_a_shape_error_naming_the_op_and_line_before_compiling():
    main, startup = _programs()
    with fluid.program_guard(main, startup), fj.unique_name.guard():
        x = fluid.layers.data("x", shape=[6], dtype="float32")
        y = fluid.layers.fc(x, 3)                                            # the line named
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    traces = exe.trace_count
    with pytest.raises(fj.ShapeError, match=r"(?s)'mul'.*shape=\(2, 5\).*test_fluid1_feed_rules.py"):
        exe.run(main, feed={"x": np.ones((2, 5), "float32")}, fetch_list=[y], scope=scope)
    # a float64 array meeting float32 weights: Fluid's kernel refused it too
    with pytest.raises(fj.ShapeError, match=r"float64.*float32.*astype"):
        exe.run(main, feed={"x": np.ones((2, 6), "float64")}, fetch_list=[y], scope=scope)
    assert exe.trace_count == traces                                        # nothing compiled
    # a rank the op can take (mul flattens): runs, as in Paddle
    x3 = np.random.default_rng(2).random((2, 3, 2)).astype("float32")
    ours, = exe.run(main, feed={"x": x3}, fetch_list=[y], scope=scope)
    theirs, = po.run(main.serialize(), {"x": x3}, [y.name], po.persistable_values(main, scope))
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


def test_the_fed_dtype_decides_for_layers_data():
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        ids = fluid.layers.data("ids", shape=[1], dtype="float32")
        doubled = fluid.layers.scale(ids, 2.0)
    exe = fluid.Executor(fluid.CPUPlace())
    fed = np.arange(5, dtype="int64").reshape(5, 1)
    ours, = exe.run(main, feed={"ids": fed}, fetch_list=[doubled])
    assert ours.dtype == np.int64
    np.testing.assert_array_equal(ours, fed * 2)
    # the step compiles per feed dtype: float32 afterwards runs as float32
    ours32, = exe.run(main, feed={"ids": fed.astype("float32")}, fetch_list=[doubled])
    assert ours32.dtype == np.float32
    theirs, = po.run(main.serialize(), {"ids": fed}, [doubled.name])
    assert theirs.dtype == np.int64
    np.testing.assert_array_equal(ours, theirs)


def test_a_hard_label_declared_float_becomes_int64_with_a_warning_and_trains_like_paddle():
    """A language model declares float32 labels, feeds int64 ids, passes them as hard labels."""
    main, startup = _programs()
    main.random_seed = startup.random_seed = 3
    with fluid.program_guard(main, startup), fj.unique_name.guard():
        x = fluid.layers.data("x", shape=[4], dtype="float32")
        label = fluid.layers.data("label", shape=[1], dtype="float32")
        logits = fluid.layers.fc(x, 5)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            loss = fluid.layers.softmax_with_cross_entropy(logits, label, soft_label=False)  # LINE
        avg = fluid.layers.mean(loss)
    msgs = [str(w.message) for w in caught if "hard labels" in str(w.message)]
    assert len(msgs) == 1 and "test_fluid1_feed_rules.py" in msgs[0] and "'label'" in msgs[0]
    assert caught[0].filename.endswith("test_fluid1_feed_rules.py")
    assert label.dtype == "int64"
    rng = np.random.default_rng(4)
    feed = {"x": rng.random((6, 4)).astype("float32"), "label": rng.integers(0, 5, (6, 1)).astype("int64")}
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    ours, = exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    params = po.persistable_values(main, scope)
    theirs, = po.run(main.serialize(), feed, [loss.name], params)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)
    w, b = params["fc_0.w_0"], params["fc_0.b_0"]
    z = feed["x"] @ w + b
    logp = z - np.log(np.exp(z - z.max(1, keepdims=True)).sum(1, keepdims=True)) - z.max(1, keepdims=True)
    np.testing.assert_allclose(ours[:, 0], -logp[np.arange(6), feed["label"][:, 0]], rtol=1e-5)


def test_fluid_data_float_hard_label_is_still_refused():
    """A need_check_feed float label can run neither way in Paddle: refused at build time."""
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [-1, 4], "float32")
        label = fluid.data("label", [-1, 1], "float32")
        logits = fluid.layers.fc(x, 5)
        with pytest.raises(fj.ShapeError, match="int64"):
            fluid.layers.softmax_with_cross_entropy(logits, label)
    assert label.dtype == "float32"


def test_py_reader_slots_take_the_batch_as_fed():
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        reader = fluid.layers.py_reader(capacity=2, shapes=[[-1, 16, 1]], dtypes=["int64"])
        ids = fluid.layers.read_file(reader)                 # one slot: the variable itself
        total = fluid.layers.reduce_sum(fluid.layers.cast(ids, "float32"))
    assert not ids.need_check_feed
    exe = fluid.Executor(fluid.CPUPlace())
    fed = np.ones((8, 13, 1), "int64")
    assert float(exe.run(main, feed={ids.name: fed}, fetch_list=[total])[0]) == fed.size


# -- item 6: Fluid's shape [1] results -----------------------------------------------------------------
def test_fluid_layers_results_are_shape_one_without_a_flag():
    """fluid.layers.mean, reduce_* over every dim and accuracy are [1], as Fluid 1.8's ops made them
    (mean_op: SetOutputDim("Out", {1}); reduce with reduce_all: {1}); scripts read np.array(v)[0]."""
    main, startup = _programs()
    main.random_seed = startup.random_seed = 2
    with fluid.program_guard(main, startup), fj.unique_name.guard():
        x = fluid.layers.data("x", shape=[4], dtype="float32")
        label = fluid.layers.data("label", shape=[1], dtype="int64")
        prob = fluid.layers.fc(x, 3, act="softmax")
        avg = fluid.layers.mean(fluid.layers.cross_entropy(prob, label))
        total = fluid.layers.reduce_sum(x)
        kept = fluid.layers.reduce_sum(x, keep_dim=True)
        acc = fluid.layers.accuracy(prob, label)
        fluid.optimizer.SGD(0.1).minimize(avg)
    assert avg.shape == total.shape == acc.shape == (1,) and kept.shape == (1, 1)
    rng = np.random.default_rng(5)
    feed = {"x": rng.random((6, 4)).astype("float32"), "label": rng.integers(0, 3, (6, 1)).astype("int64")}
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    params = po.persistable_values(main, scope)
    outs = exe.run(main, feed=feed, fetch_list=[avg, total, acc], scope=scope)
    assert [o.shape for o in outs] == [(1,), (1,), (1,)]
    assert np.array(outs[1])[0] == pytest.approx(feed["x"].sum(), rel=1e-5)     # the book's idiom
    theirs = po.run(main.serialize(), feed, [avg.name, total.name, acc.name], params)
    for a, b in zip(outs, theirs):
        np.testing.assert_allclose(np.array(a).reshape(-1), np.array(b).reshape(-1), rtol=1e-5)
    # the bytes say it: the parsed program keeps [1]
    parsed = fj.Program.parse_from_string(main.serialize())
    assert parsed.global_block().var(avg.name).shape == (1,)


def test_a_paddle_2x_program_keeps_its_0d_results():
    """Bytes Paddle 2.6 wrote declare the mean 0-d: fluidjax runs them with 0-d results."""
    import paddle

    paddle.enable_static()
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [-1, 3], "float32")
        avg = paddle.mean(x)
        total = paddle.sum(x)
    assert tuple(avg.shape) == ()
    program = fj.Program.parse_from_string(main.desc.serialize_to_string())
    exe = fluid.Executor(fluid.CPUPlace())
    xs = np.arange(6, dtype="float32").reshape(2, 3)
    got_avg, got_total = exe.run(program, feed={"x": xs}, fetch_list=[avg.name, total.name])
    assert got_avg.shape == () and got_total.shape == ()
    assert float(got_avg) == pytest.approx(2.5) and got_avg[0] == pytest.approx(2.5) and float(got_total) == 15


def test_auc_results_are_shape_one():
    main, startup = _programs()
    with fluid.program_guard(main, startup), fj.unique_name.guard():
        p = fluid.layers.data("p", shape=[1], dtype="float32")
        label = fluid.layers.data("label", shape=[1], dtype="int64")
        global_auc, batch_auc, _ = fluid.layers.auc(fluid.layers.concat([1 - p, p], axis=1), label,
                                                    num_thresholds=63)
    assert global_auc.shape == batch_auc.shape == (1,)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    feed = {"p": np.array([[0.1], [0.8], [0.6], [0.3]], "float32"), "label": np.array([[0], [1], [1], [0]], "int64")}
    got, batch = exe.run(main, feed=feed, fetch_list=[global_auc, batch_auc])
    assert got.shape == batch.shape == (1,) and np.array(got)[0] == pytest.approx(1.0)
