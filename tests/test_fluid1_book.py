"""The Fluid 1.x API the PaddlePaddle book's chapter scripts use, in programs written the way
Fluid 1.x code is written (``import fluidjax as fluid``), each checked against Paddle 2.6.2
running the same serialized program where Paddle still has the op, else against NumPy.

Fast tests cover one API each (signatures, save/load layouts, fetch and feed rules, the LoD
fixes the chapters needed); the ``slow`` ones train small chapter-like models end to end (build,
train with a falling loss, save, load, infer). docs/fluid1.md has the table of the API.
"""

from __future__ import annotations

import os

import jax  # noqa: F401  (before paddle)
import numpy as np
import pytest

import fluidjax as fluid
import paddle_oracle as po

RNG = np.random.default_rng(0)


def _programs():
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 7
    return main, startup


def _lod(data, lengths):
    return fluid.create_lod_tensor(np.asarray(data), [list(lengths)], fluid.CPUPlace())


def _listdir(path):
    """The files of a saved model, without fluidjax's own hidden bookkeeping (``.fluidjax_*``)."""
    return sorted(n for n in os.listdir(path) if not n.startswith("."))


def _params(scope, program):
    return {v.name: np.asarray(scope.find_var(v.name).get_tensor()).copy()
            for v in program.list_vars() if v.persistable and scope.find_var(v.name) is not None
            and v.name not in ("feed", "fetch")}


def _run_both(main, startup, feed, fetch, lods=None):
    """Run ``main`` (after ``startup``) in fluidjax and, serialized, in Paddle with the same
    parameters: (ours, theirs). ``feed`` holds arrays; ``lods`` the lengths of the LoD ones."""
    lods = lods or {}
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    ours_feed = {k: fluid.create_lod_tensor(v, lods[k], fluid.CPUPlace()) if k in lods else v
                 for k, v in feed.items()}
    names = [f if isinstance(f, str) else f.name for f in fetch]
    ours = exe.run(main, feed=ours_feed, fetch_list=names, scope=scope)
    theirs = po.run(main.serialize(), feed, names, _params(scope, main), lods=lods)
    return ours, theirs


# -- arguments: Fluid 1.8's spellings and orders ---------------------------------------------------------
def test_bias_attr_and_param_attr_take_fluids_forms():
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", shape=[4])
        fluid.layers.fc(input=x, size=3, bias_attr=True, name="t")                   # True: a default bias
        fluid.layers.fc(input=x, size=3, bias_attr=False, name="f")                  # False: none
        fluid.layers.fc(input=x, size=3, param_attr="w_named", bias_attr="b_named")  # names
        fluid.layers.fc(x, 3, 1, fluid.ParamAttr(name="w_attr"), None, "relu")      # Fluid's positional order
        img = fluid.layers.data("img", shape=[1, 6, 6])
        conv = fluid.layers.conv2d(img, 2, 3, bias_attr=True, act=None)
        fluid.layers.batch_norm(conv, param_attr="bn1", bias_attr="bn2", moving_mean_name="bn3",
                                moving_variance_name="bn4", act="relu")
    params = {p.name for p in main.global_block().all_parameters()}
    assert {"t.w_0", "t.b_0", "f.w_0", "w_named", "b_named", "w_attr", "bn1", "bn2", "bn3", "bn4"} <= params
    assert not any(p.startswith("f.b") for p in params)
    assert "relu" in [op.type for op in main.global_block().ops]


def test_layers_in_fluids_positional_order():
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", shape=[2, 3])
        y = fluid.layers.fc(x, 4, 2)                                   # num_flatten_dims third
        assert y.shape == (-1, 2, 4)
        s = fluid.layers.scale(x, 2.0, 1.0, True, "relu")              # act after bias_after_scale
        assert [op.type for op in main.global_block().ops][-2:] == ["scale", "relu"]
        p = fluid.layers.softmax(x, False, None, 1)                    # use_cudnn, name, axis
        c = fluid.layers.fill_constant([1], "int64", 3, True)          # force_cpu fourth
        cond = fluid.layers.less_than(c, fluid.layers.fill_constant([1], "int64", 5), True)
        assert s.shape == (-1, 2, 3) and p.shape == (-1, 2, 3) and cond.dtype == "bool"
    xs = RNG.standard_normal((2, 2, 3)).astype("float32")
    ours, theirs = _run_both(main, startup, {"x": xs}, [y, s, p, cond])
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ours[2], np.exp(xs) / np.exp(xs).sum(1, keepdims=True), rtol=1e-5)


def test_expand_is_fluids_repeat_and_takes_shape_entries():
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [None, 1, 3])
        ctx = fluid.data("ctx", [None, None, 3])
        tiled = fluid.layers.expand(x, [1, fluid.layers.shape(ctx)[1], 1])   # seq2seq's attention
        assert tiled.shape == (-1, -1, 3)
        repeated = fluid.layers.expand(x, [2, 4, 1])
        assert repeated.shape == (-1, 4, 3)
        broadcast = fluid.layers.broadcast_to(x, [-1, 5, 3])                  # Paddle 2's expand
    xs = RNG.standard_normal((2, 1, 3)).astype("float32")
    cs = np.zeros((2, 6, 3), "float32")
    ours, theirs = _run_both(main, startup, {"x": xs, "ctx": cs}, [tiled, repeated, broadcast])
    np.testing.assert_array_equal(ours[0], np.tile(xs, (1, 6, 1)))
    np.testing.assert_array_equal(ours[1], np.tile(xs, (2, 4, 1)))
    np.testing.assert_array_equal(ours[2], np.broadcast_to(xs, (2, 5, 3)))
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(a, b)


def test_flatten_with_fluids_axis_gives_a_2d_result():
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [None, 3, 4, 5])
        outs = [fluid.layers.flatten(x, axis=k) for k in (0, 1, 2)] + [fluid.layers.flatten(x, 1)]
    assert [o.shape for o in outs] == [(1, -1), (-1, 60), (-1, 20), (-1, 60)]
    xs = RNG.standard_normal((2, 3, 4, 5)).astype("float32")
    ours, theirs = _run_both(main, startup, {"x": xs}, outs)
    for got, want, paddle_got in zip(ours, [xs.reshape(1, -1), xs.reshape(2, -1), xs.reshape(6, 20), xs.reshape(2, -1)],
                                     theirs):
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(got, paddle_got)


def test_variable_indexing_appends_slices():
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [None, 4, 5])
        picks = [fluid.layers.shape(x)[1], x[:, 1], x[0, 1:3, ::2], x[..., -1], x[:, None, 0]]
    assert picks[0].shape == () and picks[1].shape == (-1, 5) and picks[4].shape == (-1, 1, 5)
    xs = RNG.standard_normal((2, 4, 5)).astype("float32")
    ours, theirs = _run_both(main, startup, {"x": xs}, picks)
    for got, want, paddle_got in zip(ours, [np.int32(4), xs[:, 1], xs[0, 1:3, ::2], xs[..., -1], xs[:, None, 0]],
                                     theirs):
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(got, paddle_got)
    with pytest.raises(TypeError, match="not supported"):
        x[[0, 1]]


def test_fluid_embedding_keeps_the_id_dim_and_layers_embedding_drops_it():
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        ids = fluid.data("ids", [None, 1], dtype="int64")
        words = fluid.data("words", [None], dtype="int64", lod_level=1)
        v2 = fluid.embedding(input=ids, size=[10, 4], param_attr="shared_w")
        v1 = fluid.layers.embedding(input=ids, size=[10, 4], param_attr="shared_w")
        seq = fluid.embedding(input=words, size=[10, 4], param_attr="shared_w", is_sparse=True)
    assert v2.shape == (-1, 1, 4) and v1.shape == (-1, 4) and seq.shape == (-1, 4) and seq.lod_level == 1
    types = [op.type for op in main.global_block().ops]
    assert types == ["lookup_table_v2", "lookup_table", "lookup_table_v2"]
    assert len(main.global_block().all_parameters()) == 1            # one table, shared by name
    feed = {"ids": np.array([[3], [7]], "int64"), "words": np.array([1, 2, 9], "int64")}
    ours, theirs = _run_both(main, startup, feed, [v2, v1, seq], lods={"words": [[2, 1]]})
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(ours[0][:, 0], ours[1])


def test_cross_entropy_takes_labels_without_the_trailing_one():
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        logits = fluid.data("logits", [None, 3, 5])
        label = fluid.data("label", [None, 3], dtype="int64")
        loss = fluid.layers.cross_entropy(input=fluid.layers.softmax(logits), label=label)
    assert loss.shape == (-1, 3)
    xs = RNG.standard_normal((2, 3, 5)).astype("float32")
    ls = np.array([[0, 4, 2], [1, 1, 3]], "int64")
    ours, theirs = _run_both(main, startup, {"logits": xs, "label": ls}, [loss])
    probs = np.exp(xs) / np.exp(xs).sum(-1, keepdims=True)
    want = -np.log(np.take_along_axis(probs, ls[..., None], -1))[..., 0]
    np.testing.assert_allclose(ours[0], want, rtol=1e-5)
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-5)


# -- fetches and feeds -------------------------------------------------------------------------------------
def test_fetched_one_element_values_convert_as_numpy_1_did():
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", shape=[1])
        y = fluid.layers.scale(x, 2.0)
        avg = fluid.layers.mean(y)
    exe = fluid.Executor(fluid.CPUPlace())
    rows, value = exe.run(main, feed={"x": np.array([[1.5], [2.0]], "float32")}, fetch_list=[y, avg])
    assert ["%.2f" % row for row in rows] == ["3.00", "4.00"] and int(rows[0]) == 3   # fit_a_line's print
    # fluid.layers.mean is shape [1], as in Fluid 1.x (a Paddle 2.x program's 0-d mean also answers
    # [0]: tests/test_fluid1_feed_rules.py)
    assert value.shape == (1,) and value[0] == pytest.approx(3.5) and float(value) == pytest.approx(3.5)
    with pytest.raises(TypeError, match="one-element"):
        float(rows)
    assert type(np.asarray(rows)) is np.ndarray


def test_fetch_0d_as_1d_gives_fluids_shape_one():
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", shape=[2])
        avg = fluid.layers.mean(x)
    exe = fluid.Executor(fluid.CPUPlace())
    fluid.set_flags({"FLAGS_fetch_0d_as_1d": True})
    try:
        out = np.array(exe.run(main, feed={"x": np.ones((3, 2), "float32")}, fetch_list=[avg])[0])
    finally:
        fluid.set_flags({"FLAGS_fetch_0d_as_1d": False})
    assert out.shape == (1,) and float(out[0]) == 1.0            # recommender_system's np.array(v)[0]
    again = exe.run(main, feed={"x": np.ones((3, 2), "float32")}, fetch_list=[avg])[0]
    assert again.shape == (1,)       # without the flag too: fluid.layers.mean declares Fluid's [1]


def test_lod_ids_take_create_lod_tensors_trailing_one():
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        words = fluid.data("words", [None], dtype="int64", lod_level=1)
        pooled = fluid.layers.sequence_pool(fluid.layers.cast(words, "float32"), "sum")
    exe = fluid.Executor(fluid.CPUPlace())
    lists = [[np.int64(3), np.int64(4), np.int64(5)], [np.int64(1)]]
    tensor = fluid.create_lod_tensor(lists, [[3, 1]], fluid.CPUPlace())       # rows [4, 1], as Fluid made them
    assert np.array(tensor).shape == (4, 1)
    got, = exe.run(main, feed={"words": tensor}, fetch_list=[pooled])
    np.testing.assert_array_equal(got, [12.0, 1.0])
    with pytest.raises(fluid.FeedError, match="shape"):
        exe.run(main, feed={"words": _lod(np.ones((4, 2), "int64"), [3, 1])}, fetch_list=[pooled])


# -- saving and loading: Fluid 1.x's layouts ----------------------------------------------------------------
def _trained_mlp():
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", shape=[3])
        y = fluid.layers.data("y", shape=[1])
        hidden = fluid.layers.fc(input=x, size=4, act="relu")
        pred = fluid.layers.fc(input=hidden, size=1)
        loss = fluid.layers.mean(fluid.layers.square_error_cost(input=pred, label=y))
        fluid.optimizer.SGD(learning_rate=0.01).minimize(loss)
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    with fluid.scope_guard(scope):
        exe.run(startup)
        exe.run(main, feed={"x": np.ones((2, 3), "float32"), "y": np.ones((2, 1), "float32")}, fetch_list=[loss])
    return main, scope, exe, pred


def test_save_inference_model_writes_fluids_directory(tmp_path):
    main, scope, exe, pred = _trained_mlp()
    xs = RNG.standard_normal((5, 3)).astype("float32")
    with fluid.scope_guard(scope):
        want, = exe.run(main.clone(for_test=True), feed={"x": xs, "y": np.zeros((5, 1), "float32")},
                        fetch_list=[pred])
        separate, combined = str(tmp_path / "separate"), str(tmp_path / "combined")
        names = fluid.io.save_inference_model(separate, ["x"], [pred], exe, main_program=main)
        fluid.io.save_inference_model(combined, ["x"], pred, exe, main, model_filename="model",
                                      params_filename="params")
    assert names == ["save_infer_model/scale_0.tmp_0"]
    params = sorted(p.name for p in main.global_block().all_parameters())
    assert _listdir(separate) == sorted(["__model__"] + params)
    assert _listdir(combined) == ["model", "params"]
    for dirname, kwargs in ((separate, {}), (combined, {"model_filename": "model", "params_filename": "params"})):
        with fluid.scope_guard(fluid.core.Scope()):
            program, feeds, fetches = fluid.io.load_inference_model(dirname, exe, **kwargs)
            got, = exe.run(program, feed={feeds[0]: xs}, fetch_list=fetches)
        assert feeds == ["x"]
        np.testing.assert_allclose(got, want, rtol=1e-6)
        # Paddle 2.6 reads the same directory (its "old way" with model_filename)
        import paddle
        pexe = paddle.static.Executor(paddle.CPUPlace())
        with paddle.static.scope_guard(paddle.static.Scope()):
            p_prog, p_feeds, p_fetches = paddle.static.load_inference_model(
                dirname, pexe, model_filename=kwargs.get("model_filename", "__model__"),
                params_filename=kwargs.get("params_filename"))
            theirs, = pexe.run(p_prog, feed={"x": xs}, fetch_list=p_fetches)
        np.testing.assert_allclose(theirs, want, rtol=1e-5)
    # Variables as feeds: Paddle 2's prefix form, as before
    with fluid.scope_guard(scope):
        fluid.io.save_inference_model(str(tmp_path / "p2" / "net"), [main.global_block().var("x")], [pred], exe,
                                      program=main)
    assert _listdir(tmp_path / "p2") == ["net.pdiparams", "net.pdmodel"]
    with fluid.scope_guard(scope):
        fluid.io.save_inference_model(str(tmp_path / "only"), ["x"], [pred], exe, main, program_only=True)
    assert _listdir(tmp_path / "only") == ["__model__"]


def test_save_params_of_a_train_program_load_into_an_infer_program(tmp_path):
    def build(train: bool):
        main, startup = _programs()
        with fluid.program_guard(main, startup):
            with fluid.unique_name.guard():
                x = fluid.layers.data("x", shape=[3])
                out = fluid.layers.fc(input=fluid.layers.fc(input=x, size=4, act="tanh"), size=2)
                if train:
                    loss = fluid.layers.mean(out)
                    fluid.optimizer.Adam(learning_rate=0.1).minimize(loss)
        return main, startup, out

    train, train_start, _ = build(True)
    infer, infer_start, out = build(False)
    exe = fluid.Executor(fluid.CPUPlace())
    trained, fresh = fluid.Scope(), fluid.Scope()
    xs = RNG.standard_normal((2, 3)).astype("float32")
    with fluid.scope_guard(trained):
        exe.run(train_start)
        exe.run(train, feed={"x": xs})
        fluid.io.save_params(exe, str(tmp_path / "params"), main_program=train)
        fluid.io.save_persistables(exe, str(tmp_path / "ckpt"), train, "all")
        want, = exe.run(infer, feed={"x": xs}, fetch_list=[out])
    assert "all" in _listdir(tmp_path / "ckpt")
    assert not any("moment" in n for n in _listdir(tmp_path / "params"))     # parameters only
    with fluid.scope_guard(fresh):
        exe.run(infer_start)
        fluid.io.load_params(exe, str(tmp_path / "params"), main_program=infer)
        got, = exe.run(infer, feed={"x": xs}, fetch_list=[out])
    np.testing.assert_array_equal(got, want)
    resumed = fluid.Scope()
    with fluid.scope_guard(resumed):
        fluid.io.load_persistables(exe, str(tmp_path / "ckpt"), train, "all")
        moments = [n for n in _params(resumed, train) if "moment" in n]
    assert moments and all(np.array_equal(_params(resumed, train)[n], _params(trained, train)[n]) for n in moments)
    picked = fluid.Scope()
    w = infer.global_block().all_parameters()[0]
    with fluid.scope_guard(trained):
        fluid.io.save_vars(exe, str(tmp_path / "vars"), infer, predicate=lambda v: v.name == w.name)
    with fluid.scope_guard(picked):
        fluid.io.load_vars(exe, str(tmp_path / "vars"), infer, vars=[w])
    assert _listdir(tmp_path / "vars") == [w.name]
    np.testing.assert_array_equal(_params(picked, infer)[w.name], _params(trained, infer)[w.name])


# -- LoD fixes the chapters needed ---------------------------------------------------------------------------
def test_sum_and_fc_of_a_sequence_and_a_dense_value_match_paddle():
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        seq = fluid.layers.data("seq", shape=[3], lod_level=1)
        dense = fluid.layers.data("dense", shape=[3])
        total = fluid.layers.sums([seq, dense])
        swapped = fluid.layers.sums([dense, seq])
        mixed = fluid.layers.fc(input=[seq, dense], size=2)              # fc of a list: a sum of products
        loss = fluid.layers.mean(fluid.layers.sequence_pool(mixed, "sum"))
        fluid.backward.append_backward(loss)
    feed = {"seq": RNG.standard_normal((5, 3)).astype("float32"),
            "dense": RNG.standard_normal((5, 3)).astype("float32")}
    fetch = [total, swapped, mixed, loss, "fc_0.w_0@GRAD", "fc_0.w_1@GRAD"]
    ours, theirs = _run_both(main, startup, feed, fetch, lods={"seq": [[2, 3]]})
    np.testing.assert_allclose(ours[0], feed["seq"] + feed["dense"], rtol=1e-6)
    np.testing.assert_allclose(ours[1], feed["seq"] + feed["dense"], rtol=1e-6)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_a_plain_result_of_sequence_rows_is_fetched_without_lod():
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        seq = fluid.layers.data("seq", shape=[3], lod_level=1)
        dense = fluid.layers.data("dense", shape=[3])
        plain = fluid.layers.sums([dense, seq])               # declared as dense's: no LoD
        keeps = fluid.layers.sums([seq, dense])
    exe = fluid.Executor(fluid.CPUPlace())
    out, kept = exe.run(main, feed={"seq": _lod(np.ones((5, 3), "float32"), [2, 3]),
                                    "dense": np.ones((5, 3), "float32")}, fetch_list=[plain, keeps],
                        return_numpy=False)
    assert out.lod() == [] and np.array(out).shape == (5, 3)
    assert kept.lod() == [[0, 2, 5]]


def test_gru_unit_shares_no_lod_and_its_state_expands_by_ids():
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", shape=[6], lod_level=1)
        h = fluid.layers.data("h", shape=[2])
        ids = fluid.layers.data("ids", shape=[1], dtype="int64", lod_level=2)
        hidden, _, gate = fluid.layers.gru_unit(input=x, hidden=h, size=6)
        assert hidden.lod_level == 0 and gate.lod_level == 0
        expanded = fluid.layers.sequence_expand(hidden, ids)              # the book's decoder state
    feed = {"x": RNG.standard_normal((3, 6)).astype("float32"), "h": RNG.standard_normal((3, 2)).astype("float32"),
            "ids": np.arange(5, dtype="int64").reshape(5, 1)}
    lods = {"x": [[1, 1, 1]], "ids": [[1, 1, 1], [2, 0, 3]]}
    ours, theirs = _run_both(main, startup, feed, [hidden, expanded], lods=lods)
    assert ours[1].shape == (5, 2)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_check_nan_inf_with_lod_outputs_checks_the_real_rows_only():
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", shape=[2], lod_level=1)
        logged = fluid.layers.log(x)                           # padding rows are 0: log gives -inf there
        pooled = fluid.layers.sequence_pool(logged, "sum")
    exe = fluid.Executor(fluid.CPUPlace())
    fluid.set_flags({"FLAGS_check_nan_inf": True})
    try:
        got, = exe.run(main, feed={"x": _lod(np.ones((5, 2), "float32"), [2, 3])}, fetch_list=[pooled])
        np.testing.assert_array_equal(got, np.zeros((2, 2)))
        bad = np.ones((5, 2), "float32")
        bad[4, 1] = 0.0                                        # a real row's -inf is found
        with pytest.raises(fluid.NumericCheckError, match="log"):
            exe.run(main, feed={"x": _lod(bad, [2, 3])}, fetch_list=[pooled])
    finally:
        fluid.set_flags({"FLAGS_check_nan_inf": False})


def test_sequence_softmax_of_an_empty_sequence_has_finite_gradients():
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", shape=[1], lod_level=1)
        x.stop_gradient = False
        soft = fluid.layers.sequence_softmax(fluid.layers.scale(x, 3.0))
        loss = fluid.layers.mean(fluid.layers.elementwise_mul(soft, x))
        fluid.backward.append_backward(loss)
    xs = RNG.standard_normal((5, 1)).astype("float32")
    ours, theirs = _run_both(main, startup, {"x": xs}, [soft, "x@GRAD"], lods={"x": [[2, 0, 3]]})
    assert np.all(np.isfinite(ours[1]))
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def _attention_decoder(encoded, encoded_proj, state, word, size):
    """One step of the book's attention decoder (``simple_attention`` + ``gru_unit``)."""
    state_proj = fluid.layers.fc(input=state, size=size, bias_attr=False)
    expanded = fluid.layers.sequence_expand(x=state_proj, y=encoded_proj)
    mixed = fluid.layers.elementwise_add(encoded_proj, expanded)
    weights = fluid.layers.sequence_softmax(fluid.layers.fc(input=mixed, size=1, bias_attr=False))
    scaled = fluid.layers.elementwise_mul(x=encoded, y=fluid.layers.reshape(weights, shape=[-1]), axis=0)
    context = fluid.layers.sequence_pool(input=scaled, pool_type="sum")
    gates = fluid.layers.fc(input=[word, context], size=size * 3, bias_attr=False)
    return fluid.layers.gru_unit(input=gates, hidden=state, size=size * 3)[0]


def test_attention_in_a_dynamic_rnn_trains_with_unequal_lengths_as_paddle():
    """machine_translation's training decoder: step lengths [3, 1], encoder lengths [2, 3] (its
    loss was NaN from the second step)."""
    import paddle

    size = 4
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        enc = fluid.layers.data("enc", shape=[size], lod_level=1)
        trg = fluid.layers.data("trg", shape=[size], lod_level=1)
        enc_proj = fluid.layers.fc(input=enc, size=size, bias_attr=False)
        enc_last = fluid.layers.sequence_last_step(enc)
        rnn = fluid.layers.DynamicRNN()
        with rnn.block():
            word = rnn.step_input(trg)
            state = rnn.memory(init=enc_last, need_reorder=True)
            new_state = _attention_decoder(rnn.static_input(enc), rnn.static_input(enc_proj), state, word, size)
            rnn.update_memory(state, new_state)
            rnn.output(fluid.layers.fc(input=new_state, size=3, act="softmax"))
        label = fluid.layers.data("label", shape=[1], dtype="int64", lod_level=1)
        loss = fluid.layers.mean(fluid.layers.cross_entropy(input=rnn(), label=label))
    forward = main.serialize()
    with fluid.program_guard(main, startup):
        fluid.optimizer.SGD(learning_rate=0.5).minimize(loss)
    feed = {"enc": RNG.standard_normal((5, size)).astype("float32"),
            "trg": RNG.standard_normal((4, size)).astype("float32"), "label": np.array([[0], [2], [1], [2]], "int64")}
    lods = {"enc": [[2, 3]], "trg": [[3, 1]], "label": [[3, 1]]}
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    params = _params(scope, main)
    ours = [float(exe.run(main, feed={k: _lod(v, lods[k][0]) for k, v in feed.items()}, fetch_list=[loss],
                          scope=scope)[0]) for _ in range(4)]
    assert all(np.isfinite(ours)) and ours[-1] < ours[0]
    pd_main, pd_startup = po.parse(forward), paddle.static.Program()
    with paddle.static.program_guard(pd_main, pd_startup):
        paddle.optimizer.SGD(learning_rate=0.5).minimize(pd_main.global_block().var(loss.name))
    pd_scope = paddle.static.Scope()
    # Paddle's learning rate variable is its own (its name comes from Paddle's unique-name counter,
    # which earlier tests advance): its startup gives it its value, the parameters come from ours.
    paddle.static.Executor(paddle.CPUPlace()).run(pd_startup, scope=pd_scope)
    theirs = [float(po.run(pd_main, feed, [loss.name], params if i == 0 else None, scope=pd_scope, lods=lods)[0])
              for i in range(4)]
    np.testing.assert_allclose(ours, theirs, rtol=1e-4)


def _mt_decoder_program(size, vocab, beam, max_len):
    """The book's ``machine_translation/train.py`` ``decode()``: a ``While`` beam search whose
    encoder output is ``sequence_expand``-ed by the selected ids and assigned back every step
    (one row per source first, one per live prefix after)."""
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        src = fluid.layers.data("src", shape=[1], dtype="int64", lod_level=1)
        encoded = fluid.layers.fc(input=fluid.layers.embedding(src, [vocab, size]), size=size, act="tanh")
        encoded_proj = fluid.layers.fc(input=encoded, size=size, bias_attr=False)
        first_state = fluid.layers.fc(input=fluid.layers.sequence_last_step(encoded), size=size, act="tanh")
        max_length = fluid.layers.fill_constant(shape=[1], dtype="int64", value=max_len)
        counter = fluid.layers.zeros(shape=[1], dtype="int64", force_cpu=True)
        init_ids = fluid.layers.data("init_ids", shape=[1], dtype="int64", lod_level=2)
        init_scores = fluid.layers.data("init_scores", shape=[1], dtype="float32", lod_level=2)
        ids_array = fluid.layers.array_write(init_ids, i=counter)
        scores_array = fluid.layers.array_write(init_scores, i=counter)
        state_array = fluid.layers.array_write(first_state, i=counter)
        cond = fluid.layers.less_than(x=counter, y=max_length)
        loop = fluid.layers.While(cond=cond)
        with loop.block():
            pre_ids = fluid.layers.array_read(array=ids_array, i=counter)
            pre_score = fluid.layers.array_read(array=scores_array, i=counter)
            pre_state = fluid.layers.array_read(array=state_array, i=counter)
            word = fluid.layers.embedding(input=pre_ids, size=[vocab, size])
            state = _attention_decoder(encoded, encoded_proj, pre_state, word, size)
            prob = fluid.layers.fc(input=state, size=vocab, act="softmax")
            top_scores, top_ids = fluid.layers.topk(prob, k=beam)
            accu = fluid.layers.elementwise_add(x=fluid.layers.log(top_scores),
                                                y=fluid.layers.reshape(pre_score, shape=[-1]), axis=0)
            accu = fluid.layers.lod_reset(x=accu, y=pre_ids)
            selected_ids, selected_scores = fluid.layers.beam_search(pre_ids, pre_score, top_ids, accu, beam,
                                                                     end_id=1)
            fluid.layers.increment(x=counter, value=1, in_place=True)
            fluid.layers.array_write(selected_ids, array=ids_array, i=counter)
            fluid.layers.array_write(selected_scores, array=scores_array, i=counter)
            fluid.layers.array_write(fluid.layers.sequence_expand(state, selected_ids), array=state_array, i=counter)
            fluid.layers.assign(fluid.layers.sequence_expand(encoded, selected_ids), encoded)
            fluid.layers.assign(fluid.layers.sequence_expand(encoded_proj, selected_ids), encoded_proj)
            length_cond = fluid.layers.less_than(x=counter, y=max_length)
            finish_cond = fluid.layers.logical_not(fluid.layers.is_empty(x=selected_ids))
            fluid.layers.logical_and(x=length_cond, y=finish_cond, out=cond)
        ids, scores = fluid.layers.beam_search_decode(ids=ids_array, scores=scores_array, beam_size=beam, end_id=1)
    return main, startup, ids, scores


def test_while_beam_decoder_with_a_growing_encoder_state_matches_paddle():
    main, startup, ids, scores = _mt_decoder_program(size=6, vocab=12, beam=3, max_len=5)
    lengths = [3, 1, 4]
    n = len(lengths)
    feed = {"src": RNG.integers(2, 12, (sum(lengths), 1)).astype("int64"),
            "init_ids": np.zeros((n, 1), "int64"), "init_scores": np.zeros((n, 1), "float32")}
    lods = {"src": [lengths], "init_ids": [[1] * n, [1] * n], "init_scores": [[1] * n, [1] * n]}
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    ours = exe.run(main, feed={k: fluid.create_lod_tensor(v, lods[k], fluid.CPUPlace()) for k, v in feed.items()},
                   fetch_list=[ids, scores], scope=scope, return_numpy=False)
    theirs = po.run_lod(main.serialize(), feed, [ids.name, scores.name], _params(scope, main), lods=lods)
    for a, b in zip(ours, theirs):
        assert a.lod() == b.lod()
        np.testing.assert_allclose(np.array(a), np.array(b), rtol=1e-5, atol=1e-6)
    assert len(ours[0].lod()[0]) == n + 1 and np.array(ours[0]).size > n


# -- the chapters' models, small: build, train, save, load, infer ---------------------------------------------
def _train(main, startup, loss, batches, steps):
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    losses = []
    with fluid.scope_guard(scope):
        exe.run(startup)
        for step in range(steps):
            losses.append(float(exe.run(main, feed=batches(step), fetch_list=[loss])[0]))
    assert all(np.isfinite(losses)), losses
    assert np.mean(losses[-3:]) < np.mean(losses[:3]), losses
    return exe, scope


def _save_load_infer(tmp_path, exe, scope, feeds, targets, feed, main):
    with fluid.scope_guard(scope):
        want = exe.run(main.clone(for_test=True), feed=feed, fetch_list=targets, return_numpy=False)
        fluid.io.save_inference_model(str(tmp_path), feeds, targets, exe, main_program=main)
    with fluid.scope_guard(fluid.core.Scope()):
        program, names, fetches = fluid.io.load_inference_model(str(tmp_path), exe)
        got = exe.run(program, feed={n: feed[n] for n in names}, fetch_list=fetches, return_numpy=False)
    assert names == list(feeds)
    for a, b in zip(got, want):
        np.testing.assert_allclose(np.array(a), np.array(b), rtol=1e-5, atol=1e-6)
        assert a.lod() == b.lod()


@pytest.mark.slow
def test_recognize_digits_lenet_trains_saves_and_infers(tmp_path):
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        img = fluid.data(name="img", shape=[None, 1, 28, 28], dtype="float32")
        label = fluid.data(name="label", shape=[None, 1], dtype="int64")
        conv = fluid.nets.simple_img_conv_pool(input=img, filter_size=5, num_filters=8, pool_size=2,
                                               pool_stride=2, act="relu")
        conv = fluid.layers.batch_norm(conv)
        conv = fluid.nets.simple_img_conv_pool(input=conv, filter_size=5, num_filters=8, pool_size=2,
                                               pool_stride=2, act="relu")
        prediction = fluid.layers.fc(input=conv, size=10, act="softmax")
        loss = fluid.layers.mean(fluid.layers.cross_entropy(input=prediction, label=label))
        acc = fluid.layers.accuracy(input=prediction, label=label)
        test_program = main.clone(for_test=True)
        fluid.optimizer.Adam(learning_rate=0.01).minimize(loss)
    templates = RNG.uniform(-1, 1, (10, 1, 28, 28)).astype("float32")
    labels = RNG.integers(0, 10, (8, 16, 1))
    feeder = fluid.DataFeeder(feed_list=[img, label], place=fluid.CPUPlace())

    def batch(step):
        ys = labels[step % 8]
        return feeder.feed([(templates[y[0]] + RNG.normal(0, 0.3, (1, 28, 28)).astype("float32"), int(y[0]))
                            for y in ys])

    exe, scope = _train(main, startup, loss, batch, 12)
    with fluid.scope_guard(scope):
        acc_value, = exe.run(test_program, feed=batch(0), fetch_list=[acc])
    assert float(acc_value) > 0.3
    _save_load_infer(tmp_path, exe, scope, ["img"], [prediction], {"img": batch(1)["img"]}, main)


@pytest.mark.slow
def test_word2vec_ngram_trains_saves_and_infers(tmp_path):
    dict_size, n = 30, 5
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        words = [fluid.data(name=f"w{i}", shape=[None, 1], dtype="int64") for i in range(n)]
        embeds = [fluid.embedding(input=w, size=[dict_size, 8], param_attr="shared_w") for w in words[:-1]]
        hidden = fluid.layers.fc(input=fluid.layers.concat(input=embeds, axis=1), size=16, act="sigmoid")
        predict = fluid.layers.fc(input=hidden, size=dict_size, act="softmax")
        loss = fluid.layers.mean(fluid.layers.cross_entropy(input=predict, label=words[-1]))
        fluid.optimizer.AdagradOptimizer(learning_rate=0.2,
                                         regularization=fluid.regularizer.L2DecayRegularizer(8e-4)).minimize(loss)

    def batch(step):
        rng = np.random.default_rng(step % 4)
        first = rng.integers(0, dict_size, (32, 1))
        grams = [(first + 3 * k) % dict_size for k in range(n)]
        return {f"w{i}": g.astype("int64") for i, g in enumerate(grams)}

    exe, scope = _train(main, startup, loss, batch, 20)
    feed = {f"w{i}": fluid.create_lod_tensor(np.array([[i + 1]], "int64"), [[1]], fluid.CPUPlace()) for i in range(4)}
    _save_load_infer(tmp_path, exe, scope, [f"w{i}" for i in range(4)], [predict],
                     {k: np.array(v) for k, v in feed.items()}, main)


def _sentiment_batch(step, dict_size=50, batch=8):
    rng = np.random.default_rng(step % 4)
    lengths = rng.integers(2, 9, batch)
    labels = rng.integers(0, 2, (batch, 1))
    ids = np.concatenate([rng.integers(0, dict_size // 2, n) + (dict_size // 2) * y[0]
                          for n, y in zip(lengths, labels)])
    return {"words": _lod(ids.astype("int64"), lengths.tolist()), "label": labels.astype("int64")}


@pytest.mark.slow
@pytest.mark.parametrize("net", ["conv", "stacked_lstm"])
def test_understand_sentiment_trains_saves_and_infers(tmp_path, net):
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        data = fluid.data(name="words", shape=[None], dtype="int64", lod_level=1)
        label = fluid.data(name="label", shape=[None, 1], dtype="int64")
        emb = fluid.embedding(input=data, size=[50, 16], is_sparse=True)
        if net == "conv":
            conv_3 = fluid.nets.sequence_conv_pool(input=emb, num_filters=8, filter_size=3, act="tanh",
                                                   pool_type="sqrt")
            conv_4 = fluid.nets.sequence_conv_pool(input=emb, num_filters=8, filter_size=4, act="tanh",
                                                   pool_type="sqrt")
            prediction = fluid.layers.fc(input=[conv_3, conv_4], size=2, act="softmax")
        else:
            fc1 = fluid.layers.fc(input=emb, size=16)
            lstm1, _ = fluid.layers.dynamic_lstm(input=fc1, size=16)
            inputs = [fc1, lstm1]
            for i in range(2, 4):
                fc = fluid.layers.fc(input=inputs, size=16)
                lstm, _ = fluid.layers.dynamic_lstm(input=fc, size=16, is_reverse=(i % 2) == 0)
                inputs = [fc, lstm]
            prediction = fluid.layers.fc(input=[fluid.layers.sequence_pool(input=inputs[0], pool_type="max"),
                                                fluid.layers.sequence_pool(input=inputs[1], pool_type="max")],
                                         size=2, act="softmax")
        loss = fluid.layers.mean(fluid.layers.cross_entropy(input=prediction, label=label))
        fluid.layers.accuracy(input=prediction, label=label)
        fluid.optimizer.Adagrad(learning_rate=0.05).minimize(loss)
    exe, scope = _train(main, startup, loss, _sentiment_batch, 16)
    _save_load_infer(tmp_path, exe, scope, ["words"], [prediction], {"words": _sentiment_batch(0)["words"]}, main)


@pytest.mark.slow
def test_label_semantic_roles_crf_trains_saves_and_infers(tmp_path):
    main, startup = _programs()
    names = ["word", "verb", "mark"]
    with fluid.program_guard(main, startup):
        feats = [fluid.data(name=n, shape=[None, 1], dtype="int64", lod_level=1) for n in names]
        embs = [fluid.embedding(input=f, size=[20, 8], param_attr="emb" if n == "word" else None)
                for f, n in zip(feats, names)]
        hidden = fluid.layers.sums(input=[fluid.layers.fc(input=e, size=16, act="tanh") for e in embs])
        lstm = fluid.layers.dynamic_lstm(input=fluid.layers.fc(input=hidden, size=64), size=64,
                                         candidate_activation="relu", gate_activation="sigmoid",
                                         cell_activation="sigmoid")[0]
        feature = fluid.layers.sums(input=[fluid.layers.fc(input=hidden, size=5, act="tanh"),
                                           fluid.layers.fc(input=lstm, size=5, act="tanh")])
        target = fluid.layers.data(name="target", shape=[1], dtype="int64", lod_level=1)
        crf_cost = fluid.layers.linear_chain_crf(input=feature, label=target,
                                                 param_attr=fluid.ParamAttr(name="crfw", learning_rate=0.1))
        loss = fluid.layers.mean(crf_cost)
        fluid.optimizer.SGD(learning_rate=fluid.layers.exponential_decay(
            learning_rate=0.05, decay_steps=100, decay_rate=0.5, staircase=True)).minimize(loss)
        fluid.layers.crf_decoding(input=feature, param_attr=fluid.ParamAttr(name="crfw"))

    def batch(step):
        rng = np.random.default_rng(step % 4)
        lengths = rng.integers(2, 7, 4).tolist()
        words = rng.integers(0, 20, (sum(lengths), 1))
        out = {n: _lod(rng.integers(0, 20, (sum(lengths), 1)).astype("int64"), lengths) for n in names}
        out["word"] = _lod(words.astype("int64"), lengths)
        out["target"] = _lod((words % 5).astype("int64"), lengths)
        return out

    exe, scope = _train(main, startup, loss, batch, 16)
    feed = {n: batch(0)[n] for n in names}
    _save_load_infer(tmp_path, exe, scope, names, [feature], feed, main)


@pytest.mark.slow
def test_machine_translation_decoder_runs_after_training_weights_load(tmp_path):
    """The decode program of machine_translation/train.py reads parameters saved by
    ``save_params`` (same names) and decodes a batch: LoD of beam-search results per source."""
    main, startup, ids, scores = _mt_decoder_program(size=8, vocab=20, beam=4, max_len=6)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    with fluid.scope_guard(scope):
        exe.run(startup)
        fluid.io.save_params(exe, str(tmp_path), main_program=main)
    lengths = [2, 5, 3, 1]
    n = len(lengths)
    feed = {"src": _lod(RNG.integers(2, 20, (sum(lengths), 1)).astype("int64"), lengths),
            "init_ids": fluid.create_lod_tensor(np.zeros((n, 1), "int64"), [[1] * n] * 2, fluid.CPUPlace()),
            "init_scores": fluid.create_lod_tensor(np.zeros((n, 1), "float32"), [[1] * n] * 2, fluid.CPUPlace())}
    with fluid.scope_guard(fluid.Scope()):
        fluid.io.load_params(exe, str(tmp_path), main_program=main)
        seq_ids, seq_scores = exe.run(main, feed=feed, fetch_list=[ids, scores], return_numpy=False)
    lod = seq_ids.lod()
    assert len(lod[0]) == n + 1 and lod[1][-1] == np.array(seq_ids).shape[0]
    assert seq_scores.lod() == lod and np.all(np.isfinite(np.array(seq_scores)))


@pytest.mark.slow
def test_vgg_bn_blocks_train_like_paddle():
    """image_classification's vgg_bn_drop, narrowed and without dropout (its masks are random in
    both systems): img_conv_group with batch norm, fc -> batch_norm -> fc -> fc; fluidjax and
    Paddle train the same program bytes from the same parameters on the same batches."""
    import paddle

    main, startup = _programs()
    with fluid.program_guard(main, startup):
        images = fluid.layers.data(name="pixel", shape=[3, 16, 16], dtype="float32")
        label = fluid.layers.data(name="label", shape=[1], dtype="int64")
        net = images
        for filters, groups in ((8, 2), (16, 2)):
            net = fluid.nets.img_conv_group(input=net, pool_size=2, pool_stride=2, conv_num_filter=[filters] * groups,
                                            conv_filter_size=3, conv_act="relu", conv_with_batchnorm=True,
                                            conv_batchnorm_drop_rate=[0.0] * groups, pool_type="max")
        fc1 = fluid.layers.fc(input=net, size=16, act=None)
        bn = fluid.layers.batch_norm(input=fc1, act="relu")
        fc2 = fluid.layers.fc(input=bn, size=16, act=None)
        predict = fluid.layers.fc(input=fc2, size=10, act="softmax")
        loss = fluid.layers.mean(fluid.layers.cross_entropy(input=predict, label=label))
    forward = main.serialize()
    with fluid.program_guard(main, startup):
        fluid.optimizer.Adam(learning_rate=0.01).minimize(loss)
    templates = RNG.uniform(0, 1, (10, 3, 16, 16)).astype("float32")
    batches = []
    for _ in range(6):
        ys = RNG.integers(0, 10, (16, 1))
        batches.append({"pixel": np.clip(templates[ys[:, 0]] + RNG.normal(0, 0.2, (16, 3, 16, 16)), 0, 1)
                        .astype("float32"), "label": ys.astype("int64")})
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    params = _params(scope, main)
    with jax.default_matmul_precision("float32"):
        ours = [float(exe.run(main, feed=b, fetch_list=[loss], scope=scope)[0]) for b in batches]
    pd_main, pd_startup = po.parse(forward), paddle.static.Program()
    with paddle.static.program_guard(pd_main, pd_startup):
        paddle.optimizer.Adam(learning_rate=0.01).minimize(pd_main.global_block().var(loss.name))
    pd_scope, place = paddle.static.Scope(), paddle.CPUPlace()
    with paddle.static.scope_guard(pd_scope):
        paddle.static.Executor(place).run(pd_startup)
        for name, value in params.items():
            pd_scope.var(name).get_tensor().set(np.ascontiguousarray(value), place)
    theirs = [float(po.run(pd_main, b, [loss.name], scope=pd_scope)[0]) for b in batches]
    np.testing.assert_allclose(ours, theirs, rtol=2e-3)
    assert ours[-1] < ours[0]
