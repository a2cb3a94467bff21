"""fj.to_jax on real models (issue 29's done-when, docs/jax.md): every Paddle-saved model of the
inference tests (tests/test_io.py, tests/test_passes.py), a ``While`` beam-search decoder, and LoD
inputs under ``jax.jit``.

Oracles: ``Executor.run`` of the same loaded program (bit for bit on CPU: one lowering) and Paddle
2.6.2 running the model it saved (within float32 tolerance).
"""

import os

import jax
import numpy as np
import pytest

import fluidjax as fj
import fluidjax.io as fio
from fluidjax import layer
from fluidjax.lowering.lod_value import to_host

import paddle  # noqa: E402  (after fluidjax: the other order segfaults)

paddle.enable_static()


def _rng(seed=0):
    return np.random.default_rng(seed)


# -- the Paddle-saved models of the inference tests ---------------------------------------------------
def _static_cnn(prefix):
    """tests/test_io.py's ``_paddle_static_cnn``, saved by ``paddle.static.save_inference_model``."""
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [-1, 3, 8, 8], "float32")
        h = paddle.static.nn.conv2d(x, 4, 3, padding=1)
        h = paddle.static.nn.batch_norm(h, act="relu", is_test=True)
        h = paddle.nn.functional.max_pool2d(h, 2, 2)
        h = paddle.flatten(h, 1)
        y = paddle.nn.functional.softmax(paddle.static.nn.fc(h, 6))
    with paddle.static.scope_guard(paddle.static.Scope()):
        exe = paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup)
        paddle.static.save_inference_model(prefix, [x], [y], exe, program=main)
    return [(3, 8, 8)], {p.name for p in main.all_parameters() if p.trainable}


def _fluid1_directory(combined):
    """The static CNN as tests/test_io.py's Fluid 1.x directories: ``__model__`` and the parameters
    one file each (or all in ``__params__``), written by ``paddle.static.save_vars``; fluidjax loads
    ``prefix``'s folder, Paddle the model saved beside it (``prefix + "_tmp"``)."""
    def save(prefix):
        shapes, trainable = _static_cnn(prefix + "_tmp")
        folder = os.path.dirname(prefix)
        with paddle.static.scope_guard(paddle.static.Scope()):
            exe = paddle.static.Executor(paddle.CPUPlace())
            prog, _, _ = paddle.static.load_inference_model(prefix + "_tmp", exe)
            with open(os.path.join(folder, "__model__"), "wb") as f:
                f.write(open(prefix + "_tmp.pdmodel", "rb").read())
            paddle.static.save_vars(exe, folder, prog, predicate=paddle.static.io.is_persistable,
                                    filename="__params__" if combined else None)
        return shapes, trainable
    save.fluid1 = True
    return save


class _Mlp(paddle.nn.Layer):
    def __init__(self):
        super().__init__()
        self.fc1 = paddle.nn.Linear(6, 12)
        self.fc2 = paddle.nn.Linear(12, 3)

    def forward(self, x):
        return paddle.nn.functional.softmax(self.fc2(paddle.nn.functional.relu(self.fc1(x))))


class _Cnn(paddle.nn.Layer):
    def __init__(self):
        super().__init__()
        self.conv = paddle.nn.Conv2D(3, 4, 3, padding=1)
        self.bn = paddle.nn.BatchNorm2D(4)
        self.fc = paddle.nn.Linear(4 * 4 * 4, 5)

    def forward(self, x):
        h = paddle.nn.functional.max_pool2d(paddle.nn.functional.relu(self.bn(self.conv(x))), 2)
        return self.fc(paddle.flatten(h, 1))


class _TwoInTwoOut(paddle.nn.Layer):
    def __init__(self):
        super().__init__()
        self.a = paddle.nn.Linear(4, 3)
        self.b = paddle.nn.Linear(2, 3)

    def forward(self, u, v):
        s = self.a(u) + self.b(v)
        return paddle.nn.functional.sigmoid(s), paddle.sum(s, axis=1, keepdim=True)


class _Separable(paddle.nn.Layer):
    """tests/test_passes.py's model: conv, bn, a depthwise-separable block, relu6, global pool."""

    def __init__(self):
        super().__init__()
        nn = paddle.nn
        self.conv1, self.bn1 = nn.Conv2D(3, 8, 3, padding=1), nn.BatchNorm2D(8)
        self.dw, self.bn2 = nn.Conv2D(8, 8, 3, padding=1, groups=8, bias_attr=False), nn.BatchNorm2D(8)
        self.pw, self.bn3 = nn.Conv2D(8, 6, 1, bias_attr=False), nn.BatchNorm2D(6)
        self.fc = nn.Linear(6, 5)

    def forward(self, x):
        y = paddle.nn.functional.max_pool2d(paddle.nn.functional.relu(self.bn1(self.conv1(x))), 2)
        y = y + paddle.nn.functional.relu6(self.bn2(self.dw(y)))
        y = self.bn3(self.pw(y))
        y = paddle.nn.functional.adaptive_avg_pool2d(y, 1).flatten(1)
        return self.fc(y)


def _jit_saved(make, shapes, names=("x",)):
    def save(prefix):
        paddle.disable_static()
        try:
            paddle.seed(7)
            net = make()
            net.eval()
            paddle.jit.save(net, prefix, input_spec=[paddle.static.InputSpec([None, *s], "float32", n)
                                                     for s, n in zip(shapes, names)])
            trainable = {p.name for p in net.parameters() if p.trainable}
        finally:
            paddle.enable_static()
        return shapes, trainable
    return save


def _vision(arch):
    return _jit_saved(lambda: getattr(paddle.vision.models, arch)(num_classes=10), [(3, 32, 32)])


MODELS = {
    "static_cnn": _static_cnn,
    "fluid1_per_file": _fluid1_directory(False),
    "fluid1_combined": _fluid1_directory(True),
    "jit_mlp": _jit_saved(_Mlp, [(6,)]),
    "jit_cnn": _jit_saved(_Cnn, [(3, 8, 8)]),
    "jit_two_in_two_out": _jit_saved(_TwoInTwoOut, [(4,), (2,)], names=("u", "v")),
    "jit_separable": _jit_saved(_Separable, [(3, 16, 16)], names=("image",)),
    "resnet18": pytest.param(_vision("resnet18"), marks=pytest.mark.slow),
    "mobilenet_v2": pytest.param(_vision("mobilenet_v2"), marks=pytest.mark.slow),
}


@pytest.mark.parametrize("save", list(MODELS.values()), ids=list(MODELS))
def test_paddle_saved_model_as_jax_function_equals_executor_and_paddle(tmp_path, save):
    prefix = str(tmp_path / "model" / "net")
    shapes, trainable = save(prefix)
    scope = fj.Scope()
    exe = fj.Executor()
    paddle_prefix = prefix
    if getattr(save, "fluid1", False):
        prefix, paddle_prefix = os.path.dirname(prefix), prefix + "_tmp"
    program, feeds, fetches = fio.load_inference_model(prefix, exe, scope=scope)
    fn, variables = fj.to_jax(program, feed=feeds, fetch_list=fetches, scope=scope)
    # Paddle's inference files keep no parameter flags: the trainable ones are told apart by use
    # (read through a slot with a gradient, never written), and equal Paddle's own trainable set.
    assert set(variables["params"]) == trainable      # (mobilenet_v2 has an inference-mode dropout: no key)
    rng = _rng(5)
    inputs = {n: rng.random((3, *s), dtype=np.float32) for n, s in zip(feeds, shapes)}
    want = exe.run(program, feed=inputs, fetch_list=fetches, scope=scope)
    eager, new_state = fn(variables, inputs)
    jitted, _ = jax.jit(fn)(variables, *[inputs[n] for n in feeds])
    for name, value in new_state.items():     # inference-mode batch norm passes its statistics through
        np.testing.assert_array_equal(np.asarray(value), np.asarray(variables["state"][name]))
    for got_e, got_j, ref in zip(eager, jitted, want):
        np.testing.assert_array_equal(np.asarray(got_e), ref)      # one lowering: bit for bit
        np.testing.assert_array_equal(np.asarray(got_j), ref)
    pexe = paddle.static.Executor(paddle.CPUPlace())
    with paddle.static.scope_guard(paddle.static.Scope()):
        p_prog, p_feeds, p_fetches = paddle.static.load_inference_model(paddle_prefix, pexe)
        theirs = pexe.run(p_prog, feed=inputs, fetch_list=p_fetches)
    assert list(p_feeds) == list(feeds)
    for got, ref in zip(eager, theirs):
        scale = max(np.abs(ref).max(), 1e-6)
        np.testing.assert_allclose(np.asarray(got) / scale, ref / scale, atol=2e-5)


# -- a While decoder ------------------------------------------------------------------------------------
def _beam_decoder(max_len, beam, vocab=12, hidden=6, end_id=0):
    """Fluid's book ``decode`` loop (tests/beam_decoder.py): tensor arrays of states, ids and scores,
    ``beam_search`` per step, ``beam_search_decode`` at the end."""
    from beam_decoder import while_beam_decoder

    def step(pre_ids, expanded, pre_score):
        emb = layer.embedding(pre_ids, [vocab, hidden], param_attr=fj.ParamAttr(name="emb"))
        state = layer.fc([expanded, emb], hidden, activation="tanh",
                         param_attr=[fj.ParamAttr(name="w_state"), fj.ParamAttr(name="w_emb")],
                         bias_attr=fj.ParamAttr(name="b_state"))
        score = layer.fc(layer.lod_reset(state, pre_score), vocab, activation="softmax",
                         param_attr=fj.ParamAttr(name="w_out"), bias_attr=fj.ParamAttr(name="b_out"))
        return state, score

    main, startup = fj.Program(), fj.Program()
    startup.random_seed = 3
    with fj.program_guard(main, startup):
        init_ids = layer.data("init_ids", dims=1, dtype="int64", lod_level=2)
        init_scores = layer.data("init_scores", dims=1, lod_level=2)
        context = layer.data("context", dims=hidden)
        out_ids, out_scores, counter = while_beam_decoder(context, init_ids, init_scores, step, max_len, beam, end_id)
    return main, startup, [out_ids.name, out_scores.name, counter.name]


@pytest.mark.parametrize("max_len", [3, pytest.param(40, marks=pytest.mark.slow)])
def test_while_beam_search_decoder_as_jax_function_equals_executor_and_paddle(max_len):
    import paddle_oracle as po

    sources, beam = 3, 2
    main, startup, fetch = _beam_decoder(max_len, beam)
    exe, scope = fj.Executor(), fj.Scope()
    exe.run(startup, scope=scope)
    lods = {"init_ids": [[1] * sources, [1] * sources], "init_scores": [[1] * sources, [1] * sources]}
    feed = {"init_ids": np.ones((sources, 1), "int64"), "init_scores": np.zeros((sources, 1), "float32"),
            "context": _rng(0).uniform(-1, 1, (sources, 6)).astype("float32")}
    ours_feed = {k: fj.create_lod_tensor(v, lods[k]) if k in lods else v for k, v in feed.items()}
    want = exe.run(main, feed=ours_feed, fetch_list=fetch, scope=scope, return_numpy=False)
    fn, variables = fj.to_jax(main, feed=["init_ids", "init_scores", "context"], fetch_list=fetch, scope=scope)
    eager, _ = fn(variables, ours_feed)
    lod_inputs = [fn.lod_input("init_ids", ours_feed["init_ids"]),
                  fn.lod_input("init_scores", ours_feed["init_scores"]), feed["context"]]
    jitted, _ = jax.jit(fn)(variables, *lod_inputs)
    for outs in (eager, jitted):
        ids, ids_lod = to_host(outs[0])
        scores, _ = to_host(outs[1])
        np.testing.assert_array_equal(ids, np.asarray(want[0]))            # bit for bit
        np.testing.assert_array_equal(scores, np.asarray(want[1]))
        assert [list(map(int, level)) for level in ids_lod] == want[0].lod()
        np.testing.assert_array_equal(np.asarray(outs[2]), np.asarray(want[2]))
    theirs = po.run_lod(main.serialize(), feed, fetch, po.persistable_values(main, scope), lods=lods)
    ids, ids_lod = to_host(eager[0])
    np.testing.assert_array_equal(ids.reshape(-1), np.array(theirs[0]).reshape(-1))
    np.testing.assert_allclose(to_host(eager[1])[0].reshape(-1), np.array(theirs[1]).reshape(-1), rtol=1e-5, atol=1e-6)
    assert [list(map(int, level)) for level in ids_lod] == [list(level) for level in theirs[0].lod()]
    assert int(np.asarray(eager[2]).reshape(-1)[0]) == int(np.array(theirs[2]).reshape(-1)[0])


# -- LoD inputs under jit ---------------------------------------------------------------------------------
def test_jit_of_two_lods_in_one_bucket_traces_once_and_equals_executor():
    ids = layer.data("ids", dims=1, dtype="int64", lod_level=1)
    emb = layer.embedding(ids, size=[20, 8])
    hidden, _ = layer.dynamic_lstm(layer.fc(emb, output_size=16), size=16)
    out = layer.fc(layer.sequence_pool(hidden, "max"), output_size=3)
    exe = fj.Executor()
    exe.run(fj.default_startup_program())
    fn, variables = fj.to_jax(fj.default_main_program(), feed=[ids], fetch_list=[out])
    jitted = jax.jit(fn)
    rng = _rng(2)
    # 13 and 15 rows (bucket 16), four sequences, the longest 5 and 6 (bucket 8): one signature
    results = []
    for lengths in ([3, 5, 1, 4], [6, 2, 4, 3]):
        tensor = fj.create_lod_tensor(rng.integers(0, 20, (sum(lengths), 1)).astype(np.int64), [lengths])
        want, = exe.run(feed={"ids": tensor}, fetch_list=[out])
        value = fn.lod_input("ids", tensor)
        assert value.data.shape[0] == 16
        (got,), _ = jitted(variables, value)
        np.testing.assert_array_equal(np.asarray(got), want)
        results.append(np.asarray(got))
    assert fn.trace_count == 1, "a second LoD of the same bucket must not retrace"
    assert not np.array_equal(results[0], results[1])
    # a LoD of another bucket compiles once more
    tensor = fj.create_lod_tensor(rng.integers(0, 20, (20, 1)).astype(np.int64), [[10, 10]])
    (got,), _ = jitted(variables, fn.lod_input("ids", tensor))
    np.testing.assert_array_equal(np.asarray(got), exe.run(feed={"ids": tensor}, fetch_list=[out])[0])
    assert fn.trace_count == 2



def test_a_lod_tensor_is_a_pytree_that_jit_takes_as_it_is():
    """A LoDTensor passed straight to jax.jit(fn): it flattens to the Executor's padded value (rows
    and offsets as leaves, only the buckets static), so two LoDs of one bucket trace once."""
    ids = layer.data("ids", dims=1, dtype="int64", lod_level=1)
    emb = layer.embedding(ids, size=[20, 8])
    out = layer.fc(layer.sequence_pool(emb, "sum"), output_size=3)
    exe = fj.Executor()
    exe.run(fj.default_startup_program())
    fn, variables = fj.to_jax(fj.default_main_program(), feed=[ids], fetch_list=[out])
    traces = []

    def counted(variables, *inputs):
        traces.append(1)                    # runs once per trace of the jitted function
        return fn(variables, *inputs)

    jitted = jax.jit(counted)
    rng = _rng(3)
    for lengths in ([3, 5, 1, 4], [6, 2, 4, 3]):
        tensor = fj.create_lod_tensor(rng.integers(0, 20, (sum(lengths), 1)).astype(np.int64), [lengths])
        leaves = jax.tree_util.tree_leaves(tensor)
        assert leaves[0].shape[0] == 16 and len(leaves) >= 2      # padded rows, then the offsets
        want, = exe.run(feed={"ids": tensor}, fetch_list=[out])
        (got,), _ = jitted(variables, tensor)
        np.testing.assert_array_equal(np.asarray(got), want)
        (by_name,), _ = jitted(variables, {"ids": tensor})
        np.testing.assert_array_equal(np.asarray(by_name), want)
    assert len(traces) == 2     # positional and by-name calls: two signatures, each traced once
    dense = fj.LoDTensor(np.ones((2, 3), "float32"))
    np.testing.assert_array_equal(jax.tree_util.tree_leaves(dense)[0], np.ones((2, 3), "float32"))
    assert jax.tree_util.tree_leaves(fj.LoDTensor()) == []

def test_to_flax_of_a_paddle_saved_model_has_paddles_parameters(tmp_path):
    pytest.importorskip("flax")
    prefix = str(tmp_path / "model" / "net")
    _, trainable = _static_cnn(prefix)
    scope = fj.Scope()
    program, feeds, fetches = fio.load_inference_model(prefix, fj.Executor(), scope=scope)
    module = fj.to_flax(program, feed=feeds, fetch_list=fetches, scope=scope)
    xs = _rng(6).random((2, 3, 8, 8), dtype=np.float32)
    flax_vars = module.init(jax.random.key(0), xs)
    assert set(flax_vars["params"]) == trainable
    stats = sorted(flax_vars["batch_stats"])      # Paddle's names of the mean and the variance
    assert len(stats) == 2 and stats[0].startswith("batch_norm_") and [s[-4:] for s in stats] == [".w_1", ".w_2"]
    got, = module.apply(flax_vars, xs)
    want, = fj.Executor().run(program, feed={feeds[0]: xs}, fetch_list=fetches, scope=scope)
    np.testing.assert_array_equal(np.asarray(got), want)


def test_a_program_built_with_parameters_keeps_other_persistables_in_state():
    """Only a program without Parameters (a loaded inference model) is classified by use: here a
    persistable float global read by an elementwise op stays state, as its own flags say."""
    x = layer.data("x", dims=[3])
    shift = layer.create_global_var([3], 0.5, "float32", persistable=True, name="shift")
    out = layer.fc(x + shift, output_size=2)
    exe = fj.Executor()
    exe.run(fj.default_startup_program())
    fn, variables = fj.to_jax(fj.default_main_program(), feed=[x], fetch_list=[out])
    assert "shift" in variables["state"] and sorted(variables["params"]) == ["fc_0.b_0", "fc_0.w_0"]
