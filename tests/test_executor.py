"""The Executor: feed checks, missing parameters, caching, places, fetches."""

import jax
import numpy as np
import pytest

import fluidjax as fj
from fluidjax import layer


def _model():
    x = layer.data("x", input_size=6)
    y = layer.fc(x, output_size=3, activation="relu")
    return x, y


def _snapshot(scope, names):
    return {n: np.asarray(scope.find_var(n).get_tensor()).copy() for n in names}


def test_feed_errors_are_clear_and_leave_scope_unchanged():
    x, y = _model()
    exe = fj.Executor()
    exe.run(fj.default_startup_program())
    scope = fj.global_scope()
    names = ["fc_0.w_0", "fc_0.b_0"]
    before = _snapshot(scope, names)
    traces = exe.trace_count
    good = np.ones((2, 6), np.float32)
    cases = [
        ({"nope": good}, "'nope' is not a variable"),
        ({}, "'x' has no value"),
    ]
    for feed, pattern in cases:
        with pytest.raises(fj.FeedError, match=pattern):
            exe.run(feed=feed, fetch_list=[y])
    # layer.data declares without need_check_feed (Fluid's layers.data): its dtype and dims are
    # advice, as in Paddle, and what the ops cannot take is refused by the op, before compiling.
    # (These were FeedErrors before Paddle's feed rule; need_check_feed variables keep them:
    # tests/test_fluid1_feed_rules.py.)
    cases = [
        ({"x": np.ones((2, 6), np.float64)}, "'mul'.*float64.*float32"),
        ({"x": np.ones((2, 5), np.float32)}, r"(?s)'mul'.*shape=\(2, 5\)"),
    ]
    for feed, pattern in cases:
        with pytest.raises(fj.ShapeError, match=pattern):
            exe.run(feed=feed, fetch_list=[y])
    assert exe.trace_count == traces  # nothing was compiled
    after = _snapshot(scope, names)
    assert all(np.array_equal(before[n], after[n]) for n in names)
    assert set(scope.local_var_names()) == set(names)


def test_missing_parameters_name_the_variable_and_the_startup_program():
    x, y = _model()
    with pytest.raises(fj.UninitializedVariableError, match=r"fc_0\.w_0.*startup program"):
        fj.Executor().run(feed={"x": np.ones((2, 6), np.float32)}, fetch_list=[y])


def test_same_program_and_shapes_never_retrace():
    x, y = _model()
    exe = fj.Executor()
    exe.run(fj.default_startup_program())
    feed = {"x": np.ones((4, 6), np.float32)}
    exe.run(feed=feed, fetch_list=[y])
    traces = exe.trace_count
    for _ in range(5):
        exe.run(feed=feed, fetch_list=[y])
    assert exe.trace_count == traces
    exe.run(feed={"x": np.ones((8, 6), np.float32)}, fetch_list=[y])  # a new batch size traces once
    assert exe.trace_count == traces + 1
    exe.run(feed={"x": np.ones((8, 6), np.float32)}, fetch_list=[y])
    assert exe.trace_count == traces + 1


def test_return_numpy_false_gives_lod_tensors_on_the_device():
    x, y = _model()
    exe = fj.Executor(fj.CPUPlace())
    exe.run(fj.default_startup_program())
    out, = exe.run(feed={"x": np.ones((2, 6), np.float32)}, fetch_list=[y], return_numpy=False)
    assert isinstance(out, fj.LoDTensor) and isinstance(out.value(), jax.Array) and out.shape() == (2, 3)
    assert out.lod() == [] and np.array(out).shape == (2, 3)
    out, = exe.run(feed={"x": np.ones((2, 6), np.float32)}, fetch_list=[y.name])
    assert isinstance(out, np.ndarray)


def test_fetch_a_parameter_and_a_feed():
    x, y = _model()
    exe = fj.Executor()
    exe.run(fj.default_startup_program())
    xs = np.arange(12, dtype=np.float32).reshape(2, 6)
    w, fed = exe.run(feed={"x": xs}, fetch_list=["fc_0.w_0", x])
    np.testing.assert_array_equal(fed, xs)
    np.testing.assert_array_equal(w, np.asarray(fj.global_scope().find_var("fc_0.w_0").get_tensor()))


def test_places():
    assert fj.CPUPlace().jax_device().platform == "cpu"
    if not any(d.platform == "gpu" for d in jax.devices()):
        with pytest.raises(RuntimeError, match="gpu"):
            fj.Executor(fj.CUDAPlace(0))
    if not any(d.platform == "tpu" for d in jax.devices()):
        with pytest.raises(RuntimeError, match="tpu"):
            fj.TPUPlace(0).jax_device()


def test_random_seed_makes_runs_reproducible():
    def init(seed):
        main, startup = fj.Program(), fj.Program()
        startup.random_seed = seed
        with fj.unique_name.guard(), fj.program_guard(main, startup):
            x = layer.data("x", input_size=50)
            layer.fc(x, output_size=40)
            layer.fc(x, output_size=40)
        scope = fj.Scope()
        fj.Executor().run(startup, scope=scope)
        return [np.asarray(scope.find_var(n).get_tensor()) for n in ("fc_0.w_0", "fc_1.w_0")]

    a, b, c = init(7), init(7), init(8)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    assert not np.array_equal(a[0], a[1])  # two parameters of one program differ
    assert not np.array_equal(a[0], c[0])


def test_runtime_failure_names_the_op_and_line():
    x = layer.data("x", input_size=4)
    block = fj.default_main_program().global_block()
    out = block.create_var("out", (-1, 4), "float32")
    # An op whose input nobody computes: the error says which op and variable.
    ghost = block.create_var("ghost", (-1, 4), "float32")
    block.append_op("elementwise_add", {"X": x, "Y": ghost}, {"Out": out})
    with pytest.raises(fj.FeedError, match=r"'ghost'.*elementwise_add.*test_executor\.py"):
        fj.Executor().run(feed={"x": np.ones((2, 4), np.float32)}, fetch_list=[out])


def test_changing_a_program_drops_its_stale_compiled_steps():
    x, y = _model()
    exe = fj.Executor()
    exe.run(fj.default_startup_program())
    feed = {"x": np.ones((2, 6), np.float32)}
    exe.run(feed=feed, fetch_list=[y])
    main_uid = fj.default_main_program()._uid
    plans = lambda: [k for k in exe._plans if k[0] == main_uid]  # noqa: E731
    assert len(plans()) == 1
    z = layer.relu(y)  # the program changes: a new plan, the old one goes
    out, = exe.run(feed=feed, fetch_list=[z])
    assert len(plans()) == 1 and out.shape == (2, 3) and (out >= 0).all()


def test_lod_tensor_feeds():
    seq = layer.data("words", input_size=4, lod_level=1)
    h = layer.fc(seq, output_size=2)
    assert h.lod_level == 1
    exe = fj.Executor()
    exe.run(fj.default_startup_program())
    t = fj.LoDTensor()
    t.set(np.ones((5, 4), np.float32))
    t.set_recursive_sequence_lengths([[2, 3]])
    out, = exe.run(feed={"words": t}, fetch_list=[h])
    assert out.shape == (5, 2)
