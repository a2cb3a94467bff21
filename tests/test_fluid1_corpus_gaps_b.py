"""More gaps the PaddlePaddle/models corpus run found (docs/fluid1.md, "Corpus"), each closed as a
rule and checked against Paddle 2.6.2 running the same program bytes or against NumPy."""

from __future__ import annotations

import jax  # noqa: F401  (before paddle)
import numpy as np
import pytest

import fluidjax as fluid
import paddle_oracle as po


def _programs():
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 7
    return main, startup


# -- 1. a Variable inside a shape list (ShapeTensor / ShapeTensorList) ----------------------------
def test_shape_lists_with_variables_match_paddle():
    """word2vec / DCGAN / SPADE: ``fill_constant(shape=[shape(x)[0], 1])``, ``fill_constant(shape=
    shape(y))``, ``reshape(x, [-1, var])``: the shapes travel as tensor inputs, read at trace time."""
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", shape=[6], dtype="float32")
        n = fluid.layers.shape(x)[0]
        ones = fluid.layers.fill_constant(shape=[n, 1], value=1.0, dtype="float32")
        zeros = fluid.layers.fill_constant(shape=fluid.layers.shape(x), value=2.0, dtype="float32")
        three = fluid.layers.fill_constant([1], "int32", 3)
        r = fluid.layers.reshape(x, shape=[-1, three])
        u = fluid.layers.uniform_random(shape=[n, 2], min=0.0, max=1.0)
        g = fluid.layers.gaussian_random(shape=[n, 5])
    assert ones.shape == (-1, 1) and len(r.shape) == 2
    fetch = [ones.name, zeros.name, r.name, u.name, g.name]
    feed = {"x": np.arange(24, dtype="float32").reshape(4, 6)}
    ours = fluid.Executor(fluid.CPUPlace()).run(main, feed=feed, fetch_list=fetch, scope=fluid.Scope())
    theirs = po.run(main.serialize(), feed, fetch, {})
    for a, b in zip(ours[:3], theirs[:3]):
        np.testing.assert_array_equal(np.asarray(a), b)
    np.testing.assert_array_equal(np.asarray(ours[2]), feed["x"].reshape(8, 3))
    assert np.asarray(ours[3]).shape == theirs[3].shape == (4, 2)
    assert np.asarray(ours[4]).shape == theirs[4].shape == (4, 5)


# -- 2. LoD kept through squeeze / unsqueeze / fc -------------------------------------------------
def test_squeeze_and_fc_keep_the_rows_lod_for_sequence_layers():
    """gru4rec / tagspace: ``embedding`` of (-1, 1) ids -> ``squeeze(axes=[1])`` -> ``fc`` ->
    ``dynamic_gru`` / ``sequence_conv_pool``: Paddle's Squeeze2Op / Unsqueeze2Op share X's LoD when
    the first dim stays, and fc (mul, num_flatten_dims=1) shares it; a squeeze of dim 0 drops it."""
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        ids = fluid.data("ids", shape=[None, 1], dtype="int64", lod_level=1)
        emb = fluid.embedding(ids, size=[10, 4])
        sq = fluid.layers.squeeze(emb, axes=[1])
        un = fluid.layers.unsqueeze(sq, axes=[2])
        front = fluid.layers.unsqueeze(sq, axes=[0])
        fc = fluid.layers.fc(sq, size=6, bias_attr=False)
        pooled = fluid.layers.sequence_pool(fc, "sum")
    assert (sq.lod_level, un.lod_level, front.lod_level, fc.lod_level) == (1, 1, 0, 1)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    ids_v = np.array([[1], [2], [3], [4], [5]], "int64")
    t = fluid.create_lod_tensor(ids_v, [[2, 3]], fluid.CPUPlace())
    got, = exe.run(main, feed={"ids": t}, fetch_list=[pooled], scope=scope)
    ops = main.global_block().ops
    table_name = next(op.input("W")[0] for op in ops if op.type.startswith("lookup_table"))
    w_name = next(op.input("Y")[0] for op in ops if op.type == "mul")
    table, w = (np.asarray(scope.find_var(n).get_tensor()) for n in (table_name, w_name))
    rows = table[ids_v[:, 0]] @ w
    np.testing.assert_allclose(np.asarray(got), np.stack([rows[:2].sum(0), rows[2:].sum(0)]), rtol=1e-5)


# -- 3. a started py_reader feeds its program's clones and compiled forms -----------------------
def test_started_py_reader_feeds_a_clone_and_a_compiled_program():
    """SSD: ``test_prog.clone(for_test=True)`` after building the reader, ``reader.start()``, then
    ``exe.run(clone)`` with no feed; transformer: ``exe.run(CompiledProgram(prog)...)`` with no feed."""
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        reader = fluid.layers.py_reader(capacity=4, shapes=[[-1, 3]], dtypes=["float32"])
        x = fluid.layers.read_file(reader)   # one slot: the Variable itself (Fluid 1.x)
        y = fluid.layers.reduce_sum(x * 2.0)
    clone = main.clone(for_test=True)
    batches = [np.full((2, 3), i, "float32") for i in range(1, 5)]
    reader.decorate_tensor_provider(lambda: iter([[b] for b in batches]))
    exe = fluid.Executor(fluid.CPUPlace())
    compiled = fluid.CompiledProgram(main)
    got = []
    reader.start()
    try:
        for prog in (clone, compiled, clone, main, clone):
            got.append(float(np.asarray(exe.run(prog, fetch_list=[y.name], scope=fluid.Scope())[0]).reshape(())))
    except fluid.core.EOFException:
        reader.reset()
    np.testing.assert_allclose(got, [b.sum() * 2 for b in batches])
    # after reset, nothing feeds the clone
    with pytest.raises(Exception):
        exe.run(clone, fetch_list=[y.name], scope=fluid.Scope())


# -- 4. fluid.contrib.layers basic_lstm / basic_gru ----------------------------------------------
def _sig(x):
    return 1.0 / (1.0 + np.exp(-x))


def _np_lstm_step(x, h, c, w, b, forget_bias):
    i, f, j, o = np.split(np.concatenate([x, h], 1) @ w + b, 4, axis=1)
    c2 = c * _sig(f + forget_bias) + _sig(i) * np.tanh(j)
    return np.tanh(c2) * _sig(o), c2


def _np_gru_step(x, h, wg, bg, wc, bc):
    r, u = np.split(_sig(np.concatenate([x, h], 1) @ wg + bg), 2, axis=1)
    m = np.tanh(np.concatenate([x, r * h], 1) @ wc + bc)
    return u * h + (1 - u) * m


def _param(scope, main, prefix, kind):
    names = sorted(p.name for p in main.global_block().all_parameters() if p.name.startswith(prefix) and kind in p.name)
    return [np.asarray(scope.find_var(n).get_tensor()) for n in names]


def test_basic_lstm_two_layers_bidirectional_with_lengths_matches_numpy():
    """language_model (rnn_model='basic_lstm'): Fluid 1.8's contrib basic_lstm, checked step by step
    against NumPy: 2 layers, both directions, initial states given, padded steps masked."""
    B, T, D, H, L = 3, 4, 5, 6, 2
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", shape=[B, T, D], dtype="float32")
        h0 = fluid.data("h0", shape=[L * 2, B, H], dtype="float32")
        c0 = fluid.data("c0", shape=[L * 2, B, H], dtype="float32")
        lens = fluid.data("lens", shape=[B], dtype="int64")
        from fluidjax.contrib.layers import basic_lstm
        out, last_h, last_c = basic_lstm(x, h0, c0, H, num_layers=L, sequence_length=lens, bidirectional=True,
                                         forget_bias=0.5, name="lm")
    assert out.shape[-1] == 2 * H
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    rng = np.random.default_rng(0)
    feed = {"x": rng.normal(size=(B, T, D)).astype("float32"), "h0": rng.normal(size=(L * 2, B, H)).astype("float32"),
            "c0": rng.normal(size=(L * 2, B, H)).astype("float32"), "lens": np.array([4, 2, 3], "int64")}
    got = exe.run(main, feed=feed, fetch_list=[out, last_h, last_c], scope=scope)
    mask = (np.arange(T)[None, :] < feed["lens"][:, None]).astype("float32")     # [B, T]
    h0r, c0r = feed["h0"].reshape(L, 2, B, H), feed["c0"].reshape(L, 2, B, H)
    outs, lh, lc = [], np.zeros((L, 2, B, H), "float32"), np.zeros((L, 2, B, H), "float32")
    for d, prefix in enumerate(("lm_layers_", "lm_reverse_layers_")):
        seq = feed["x"] if d == 0 else feed["x"][:, ::-1]
        m = mask if d == 0 else mask[:, ::-1]
        for layer in range(L):
            (w,), (b,) = _param(scope, main, f"{prefix}{layer}/", ".w_"), _param(scope, main, f"{prefix}{layer}/", ".b_")
            h, c, ys = h0r[layer, d], c0r[layer, d], []
            for t in range(T):
                h2, c2 = _np_lstm_step(seq[:, t], h, c, w, b, 0.5)
                mt = m[:, t:t + 1]
                h, c = h2 * mt + h * (1 - mt), c2 * mt + c * (1 - mt)
                ys.append(h)
            seq = np.stack(ys, 1)
            lh[layer, d], lc[layer, d] = h, c
        outs.append(seq if d == 0 else seq[:, ::-1])
    np.testing.assert_allclose(np.asarray(got[0]), np.concatenate(outs, 2), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(got[1]), lh.reshape(L * 2, B, H), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(got[2]), lc.reshape(L * 2, B, H), rtol=1e-4, atol=1e-5)


def test_basic_gru_zero_initial_state_time_major_matches_numpy():
    """Fluid 1.8's contrib basic_gru (no initial state: zeros; time-major input) against NumPy."""
    B, T, D, H = 2, 3, 4, 5
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", shape=[T, B, D], dtype="float32")
        out, last = fluid.contrib.layers.basic_gru(x, None, H, batch_first=False, name="g")
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    xv = np.random.default_rng(1).normal(size=(T, B, D)).astype("float32")
    got = exe.run(main, feed={"x": xv}, fetch_list=[out, last], scope=scope)
    wc, wg = _param(scope, main, "g_layers_0/", ".w_")      # sorted: candidate's name before gate's
    bc, bg = _param(scope, main, "g_layers_0/", ".b_")
    if wg.shape[1] != 2 * H:
        wc, wg, bc, bg = wg, wc, bg, bc
    h, ys = np.zeros((B, H), "float32"), []
    for t in range(T):
        h = _np_gru_step(xv[t], h, wg, bg, wc, bc)
        ys.append(h)
    np.testing.assert_allclose(np.asarray(got[0]), np.stack(ys), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(got[1]), h[None], rtol=1e-4, atol=1e-5)


def test_slice_and_crop_with_variable_bounds_match_paddle():
    """``slice(x, axes, starts=[0], ends=[shape(x)[1] - 1])`` and ``crop_tensor(x, shape=[n, 2],
    offsets=[0, var])``: Fluid 1.8's StartsTensorList / EndsTensorList / ShapeTensor / OffsetsTensor."""
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", shape=[5], dtype="float32")
        n = fluid.layers.shape(x)[0]
        m = fluid.layers.shape(x)[1]
        one = fluid.layers.fill_constant([1], "int32", 1)
        s = fluid.layers.slice(x, axes=[1], starts=[one], ends=[m - 1])
        c = fluid.layers.crop_tensor(x, shape=[n, 2], offsets=[0, one])
    fetch = [s.name, c.name]
    feed = {"x": np.arange(15, dtype="float32").reshape(3, 5)}
    ours = fluid.Executor(fluid.CPUPlace()).run(main, feed=feed, fetch_list=fetch, scope=fluid.Scope())
    theirs = po.run(main.serialize(), feed, fetch, {})
    np.testing.assert_array_equal(np.asarray(ours[0]), feed["x"][:, 1:4])
    np.testing.assert_array_equal(np.asarray(ours[1]), feed["x"][:, 1:3])
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(np.asarray(a), b)


def test_started_py_reader_joins_a_partial_feed():
    """The Fluid 1.4 transformer: ``pyreader.start()``, then ``train_exe.run(feed=[{table: ...}])``
    feeding only other (persistable) variables: the reader still gives its own variables."""
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        reader = fluid.layers.py_reader(capacity=2, shapes=[[-1, 3]], dtypes=["float32"])
        x = fluid.layers.read_file(reader)
        table = fluid.layers.create_global_var([3], 0.0, "float32", persistable=True, name="pos_table")
        y = fluid.layers.reduce_sum(fluid.layers.elementwise_mul(x, table))
    reader.decorate_tensor_provider(lambda: iter([[np.ones((2, 3), "float32")]]))
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    reader.start()
    got, = exe.run(main, feed=[{"pos_table": np.array([1.0, 2.0, 3.0], "float32")}], fetch_list=[y], scope=scope)
    reader.reset()
    np.testing.assert_allclose(np.asarray(got).reshape(()), 12.0)
